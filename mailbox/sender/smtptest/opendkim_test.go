package smtptest_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/patchbot/patchbot/internal/testenv"
	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/mailbox/dkimtest"
	"github.com/patchbot/patchbot/mailbox/dnstest"
	"github.com/patchbot/patchbot/mailbox/sender/smtptest"
)

// The receiving server the mail-authentication tests stand behind: mail
// signed with a real key (python3-dkim), sent to a real Postfix whose
// opendkim milter looks the key up in the test's DNS, lands in an mbox
// with opendkim's verdict on top, and patchbot's own check of the
// delivered mail agrees with it; opendkim strips a field that claims its
// name.
func TestOpenDKIMReceiver(t *testing.T) {
	testenv.Tools(t, "postfix", "opendkim")
	dns := dnstest.Start(t)
	key := dkimtest.NewKeys(t, "key1", "linux.dev")["linux.dev"]
	key.Publish(dns)
	od := smtptest.StartOpenDKIM(t, "mx.patchbot.test", dns.Addr)
	dir := t.TempDir()
	pf := smtptest.StartPostfixWith(t, filepath.Join(dir, "Maildir"), smtptest.Options{Mbox: filepath.Join(dir, "mail", "list.mbox"), Milter: od.Milter})
	mail := func(id, extra string) []byte {
		return []byte(fmt.Sprintf("%sFrom: Usama Arif <usama.arif@linux.dev>\r\nTo: linux-fsdevel@vger.kernel.org\r\n"+
			"Subject: [PATCH] x\r\nDate: %s\r\nMessage-ID: <%s@linux.dev>\r\n\r\nbody\r\n", extra, time.Now().Format(time.RFC1123Z), id))
	}
	forged := "Authentication-Results: mx.patchbot.test; dkim=pass header.d=linux.dev\r\n"
	send := func(raw []byte) {
		pf.Send(t, "usama.arif@linux.dev", []string{"linux-fsdevel@vger.kernel.org"}, raw)
	}
	send(key.Sign(t, mail("signed", "")))
	send(mail("unsigned", forged))
	var got [][]byte
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d mails delivered:\n%s\n%s", len(got), pf.Log(), od.Log())
		}
		time.Sleep(200 * time.Millisecond)
		got = nil
		f, err := os.Open(pf.Mbox)
		if err != nil {
			continue
		}
		mailbox.ReadMbox(f, func(raw []byte, _ int64) error { got = append(got, append([]byte(nil), raw...)); return nil })
		f.Close()
	}
	v := mailbox.NewVerifier(mailbox.DKIMConfig{DNS: dns.Addr}, nil)
	for i, want := range []string{"dkim=pass", "dkim=none"} {
		m, err := mailbox.ParseBytes(got[i])
		if err != nil {
			t.Fatal(err)
		}
		head := string(got[i][:bytes.Index(got[i], []byte("\n\n"))])
		t.Logf("delivered header %d:\n%s", i, head)
		if n := strings.Count(head, "Authentication-Results: mx.patchbot.test"); n != 1 || !strings.Contains(head, want) {
			t.Errorf("mail %d: %d fields of mx.patchbot.test, want one saying %s", i, n, want)
		}
		if ok := v.Verify(t.Context(), m).Identity().Verified(); ok != (i == 0) {
			t.Errorf("mail %d: patchbot's own check says verified=%v", i, ok)
		}
	}
}
