package peer

import "github.com/weightsnap/weightsnap/peer/internal/wire"

// Mode is a data plane: "tcp" or "rma".
type Mode = wire.Mode

// Data planes.
const (
	ModeTCP = wire.ModeTCP
	ModeRMA = wire.ModeRMA
)

// ParseMode parses a data-plane name; "" is tcp.
func ParseMode(s string) (Mode, error) { return wire.ParseMode(s) }
