package intake

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/patchbot/patchbot/mailbox"
)

// A job queued before the series was carried whole (its mails, subjects,
// files, base and tags beside the series' key) still runs: it reads as
// the series it was.
func TestRequestReadsJobsQueuedBefore(t *testing.T) {
	old := `{"title":"[PATCH 0/2] fuse: waits","patches":["cDE=","cDI="],"files":["fs/fuse/dev.c"],"base":"abc",
		"tags":["next"],"subjects":["[PATCH 1/2] fuse: one","[PATCH 2/2] fuse: two"],"thread":{"message_id":"c@x","author":"a@x"},
		"profile":"quick","series":{"author":"a@x","title":"fuse: waits","version":2,"identity":"a@x/verified"}}`
	var r Request
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	want := Series{SeriesKey: SeriesKey{Author: "a@x", Title: "fuse: waits", Version: 2, Identity: "a@x/verified"},
		Subject: "[PATCH 0/2] fuse: waits", Files: []string{"fs/fuse/dev.c"}, Base: "abc", Tags: []string{"next"},
		Patches: []Patch{{Subject: "[PATCH 1/2] fuse: one", Title: "fuse: one", Mail: []byte("p1")},
			{Subject: "[PATCH 2/2] fuse: two", Title: "fuse: two", Mail: []byte("p2")}}}
	if !reflect.DeepEqual(r.Series, want) || r.Thread.MessageID != "c@x" || r.Profile != "quick" {
		t.Errorf("read %+v, want %+v", r, want)
	}
	// Written again, it is read back the same.
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var again Request
	if err := json.Unmarshal(data, &again); err != nil || !reflect.DeepEqual(again, r) {
		t.Errorf("round trip: %+v, %v", again, err)
	}
	if first, last, err := again.Span(); first != 1 || last != 2 || err != nil {
		t.Errorf("Span = %d, %d, %v", first, last, err)
	}
}

// A check queued before it had a type of its own reads as the check.
func TestCheckReadsJobsQueuedBefore(t *testing.T) {
	old := `{"title":"[PATCH 0/3] demo","patches":null,"files":null,"thread":{"message_id":"v1-0@demo","author":"a@x"},
		"profile":"","runs":0,"series":{},"incomplete":{"thread_id":"v1-0@demo","author":"a@x","title":"demo","version":1,
		"identity":"a@x/unverified","unverified":true}}`
	var c Check
	if err := json.Unmarshal([]byte(old), &c); err != nil {
		t.Fatal(err)
	}
	s := &mailbox.Series{Author: "A <a@x>", Title: "demo", Version: 1, Identity: mailbox.Identity{Address: "a@x"}}
	if c.Thread.MessageID != "v1-0@demo" || !c.Series.Unverified || !c.Series.Is(s) {
		t.Errorf("read %+v", c)
	}
	s.Identity.Via = "DKIM/x"
	if c.Series.Is(s) {
		t.Error("a verified series of the same name is the unverified one's check's")
	}
}

// A reroll is the same series: the same author and title whatever their
// case and spacing, and the same identity where both have one.
func TestSeriesKeySame(t *testing.T) {
	k := SeriesKey{Author: "a@x", Title: "fuse:  fewer Waits", Identity: "a@x/verified"}
	for _, tc := range []struct {
		o    SeriesKey
		same bool
	}{
		{SeriesKey{Author: "A@X", Title: "fuse: fewer waits", Identity: "a@x/verified"}, true},
		{SeriesKey{Author: "a@x", Title: "fuse: fewer waits"}, true}, // from before identities
		{SeriesKey{Author: "a@x", Title: "fuse: fewer waits", Identity: "a@x/unverified"}, false},
		{SeriesKey{Author: "b@x", Title: "fuse: fewer waits"}, false},
		{SeriesKey{Author: "a@x", Title: "fuse: more waits"}, false},
	} {
		if got := k.Same(tc.o); got != tc.same {
			t.Errorf("Same(%+v) = %v", tc.o, got)
		}
	}
}
