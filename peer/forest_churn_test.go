package peer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/peer/stripes"
)

// TestForestAdopter: a stripe whose source failed re-attaches to one of
// the forest's adopters, else the root; once the root is gone (tried, or
// remembered as down), to the first live member of the rendezvous ranking,
// which takes the root's place and alone goes to the registry.
func TestForestAdopter(t *testing.T) {
	var members []string
	for i := range 10 {
		members = append(members, fmt.Sprintf("10.0.0.%d:7420", i+1))
	}
	id, err := artifact.ParseID("sha256:68314ca99738eb0ea1ade815e1c401325d17ca690f2de6342601c9ca10d9ac87")
	if err != nil {
		t.Fatal(err)
	}
	forest, err := stripes.Place(id, members, stripes.DefaultStripes)
	if err != nil {
		t.Fatal(err)
	}
	rank := forest.Ranking()
	root := rank[0]
	// The first heap child of stripe 0's head, which takes the head's place
	// under the root when the head fails.
	deep := rank[1+forest.Stripes()]
	for _, tc := range []struct {
		name      string
		self      string
		failed    string
		stripe    int
		down      []string
		want      string // "" when the stripe has no source left
		rootPlace bool   // self takes the root's place
	}{
		{name: "a head loses the root: the next of the ranking", self: rank[2], failed: root, stripe: 1, want: rank[1]},
		{name: "the next of the ranking loses the root: it takes its place", self: rank[1], failed: root, stripe: 0, rootPlace: true},
		{name: "the next of the ranking is down too", self: rank[3], failed: root, stripe: 2, down: []string{rank[1]}, want: rank[2]},
		{name: "every member before this one is gone", self: rank[3], failed: root, stripe: 2, down: []string{rank[1], rank[2]}, rootPlace: true},
		{name: "a head's first child loses the head: the root", self: deep, failed: rank[1], stripe: 0, want: root},
		{name: "a head's first child loses the head, the root down: the next of the ranking", self: deep, failed: rank[1], stripe: 0, down: []string{root}, want: rank[2]},
		{name: "the last of the ranking loses stripe 0's head: its first adopter", self: rank[len(rank)-1], failed: rank[1], stripe: 0, want: forest.Adopters(rank[len(rank)-1], rank[1], 0)[0]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fetcher{forest: &forestPlan{forest: forest, self: tc.self}, o: FetchOptions{Client: ClientConfig{Down: NewDownPeers()}}}
			for _, d := range tc.down {
				f.o.Client.Down.drop(d, errors.New("no route to host"))
			}
			tried := map[string]bool{tc.failed: true}
			if got := f.adopter(tc.failed, tc.stripe, tried); got != tc.want {
				t.Errorf("adopter: %q, want %q", got, tc.want)
			}
			if got := f.rootsPlace(tried); got != tc.rootPlace {
				t.Errorf("takes the root's place: %v, want %v", got, tc.rootPlace)
			}
		})
	}
}
