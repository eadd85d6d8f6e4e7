package mailbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// Mail is acted on in the source's order behind the reader; the first
// failure to act stops both, and the mails after it are not acted on (the
// source reads them again from the cursor stored).
func TestReadAheadActsInOrderAndStopsAtAFailure(t *testing.T) {
	var acted []string
	bad := errors.New("the store failed")
	r := NewReadAhead(context.Background(), nil, func(m *Message, cur string) error {
		acted = append(acted, cur)
		if cur == "3" {
			return bad
		}
		return nil
	})
	var takeErr error
	for i := 1; i <= 2000 && takeErr == nil; i++ {
		takeErr = r.Take(&Message{MessageID: fmt.Sprint(i), Raw: []byte("x")}, fmt.Sprint(i))
	}
	if err := r.Wait(); !errors.Is(err, bad) {
		t.Fatalf("Wait = %v, want the failure to act", err)
	}
	if takeErr == nil || r.Context().Err() == nil {
		t.Errorf("the reader went on after the failure: Take = %v, Context = %v", takeErr, r.Context().Err())
	}
	if fmt.Sprint(acted) != "[1 2 3]" {
		t.Errorf("acted on %v, want 1 2 3 in order and nothing after the failure", acted)
	}
}
