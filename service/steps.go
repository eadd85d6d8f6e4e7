package service

// Step is a point in the daemon's work where a crash test kills it.
type Step string

const (
	StepIngestRead      Step = "ingest-read"      // a mail read from a source; nothing stored
	StepIngestWritten   Step = "ingest-written"   // the mail, cursor, commands, jobs and answers written, not committed
	StepIngestCommitted Step = "ingest-committed" // all of it committed; the answers not sent
	StepJobClaimed      Step = "job-claimed"      // a job is running
	StepJobExecuted     Step = "job-executed"     // its reply rendered, not in the outbox
	StepJobReplied      Step = "job-replied"      // its reply in the outbox, the job not marked done
	StepJobDone         Step = "job-done"         // the job marked done
)

// poke wakes a loop that waits on ch, if it is not awake already (ch has
// room for one); a nil ch is a loop not started.
func poke(ch chan struct{}) {
	if ch == nil {
		return
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}
