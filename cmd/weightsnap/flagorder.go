package main

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// misplacedFlag finds a subcommand's own flag given before the subcommand
// (`weightsnap --plain-http pull REF`), which cobra would otherwise report
// as an unknown command or an argument taken for the flag's value, and says
// where the flag goes. It returns nil when args have no such flag.
func misplacedFlag(root *cobra.Command, args []string) error {
	global := root.PersistentFlags()
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || !strings.HasPrefix(arg, "-") || arg == "-" {
			return nil // the subcommand (or an argument) comes first: cobra parses the rest
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if f := lookupFlag(global, arg, name); f != nil {
			if !hasValue && f.NoOptDefVal == "" {
				i++ // its value
			}
			continue
		}
		if cmd := subcommandAfter(root, args[i+1:]); cmd != nil {
			if f := lookupFlag(cmd.Flags(), arg, name); f != nil {
				return fmt.Errorf("flag %s belongs to the subcommand: %s %s ...: %w", arg, cmd.CommandPath(), arg, errdefs.ErrInvalidArgument)
			}
		}
		return nil
	}
	return nil
}

// lookupFlag is the flag arg names in fs: --name or -s.
func lookupFlag(fs *pflag.FlagSet, arg, name string) *pflag.Flag {
	if strings.HasPrefix(arg, "--") {
		return fs.Lookup(name)
	}
	if len(name) == 1 {
		return fs.ShorthandLookup(name)
	}
	return nil
}

// subcommandAfter is the deepest command the first words of args name
// (skipping flags and their values as far as they can be told apart), or
// nil when they name none.
func subcommandAfter(root *cobra.Command, args []string) *cobra.Command {
	cmd := root
	for _, arg := range args {
		if strings.HasPrefix(arg, "-") {
			continue
		}
		next := findChild(cmd, arg)
		if next == nil {
			if cmd == root {
				continue // a value of the misplaced flag
			}
			break
		}
		cmd = next
	}
	if cmd == root {
		return nil
	}
	return cmd
}

func findChild(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}
