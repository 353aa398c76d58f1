package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// reporting is a producer that says what it moved.
type reporting struct{ artifact.Producer }

func (reporting) Transfer() store.Transfer { return store.Transfer{Endpoint: "peer:1", Fetched: 42} }

// TestMaterialise: a miss plans and builds once, with a report of the
// transfer and its timings; a hit on the known identity plans nothing.
func TestMaterialise(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 2)
	d := storetest.Open(t)
	id := storetest.Identity(src)
	hex, _ := id.ID()
	plans := 0
	plan := func(context.Context) (artifact.Identity, artifact.Producer, error) {
		plans++
		return id, reporting{&artifact.Passthrough{Src: src}}, nil
	}
	l, m, err := d.Materialise(context.Background(), plan, store.MaterialiseOptions{ID: hex})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if plans != 1 || !m.Planned || !m.Ran || !m.Built || m.Transfer == nil || m.Transfer.Endpoint != "peer:1" ||
		m.Transfer.Fetched != 42 || m.Transfer.FetchSeconds <= 0 || m.Total <= 0 {
		t.Fatalf("miss: %d plans, %+v, transfer %+v", plans, m, m.Transfer)
	}
	l, m, err = d.Materialise(context.Background(), plan, store.MaterialiseOptions{ID: hex})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if plans != 1 || m.Planned || m.Built || m.Transfer != nil {
		t.Fatalf("hit: %d plans, %+v", plans, m)
	}
}

// TestMaterialiseWaitBudget: a budget spent waiting for another build
// stops the wait, and that build goes on.
func TestMaterialiseWaitBudget(t *testing.T) {
	_, src := storetest.Checkpoint(t, 1<<20, 1)
	d := storetest.Open(t)
	id := artifact.PassthroughIdentity(src, "", storetest.Revision, "", 0, 0)
	release, done := holdBuild(d, id, src)
	plan := func(context.Context) (artifact.Identity, artifact.Producer, error) {
		return id, &artifact.Passthrough{Src: src}, nil
	}
	_, m, err := d.Materialise(context.Background(), plan, store.MaterialiseOptions{WaitBudget: 50 * time.Millisecond})
	if err == nil || !m.WaitSpent || m.Ran {
		t.Fatalf("waiter past its budget: %v, %+v", err, m)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the first build was disturbed by the waiter: %v", err)
	}
}
