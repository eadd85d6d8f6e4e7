package mailbox

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

// genMbox makes an mbox of topics*10 mails: per topic a v1 series (cover
// and three patches), a review with a trailer, and a v2 reroll of it
// threaded under v1, with a diff of realistic size in every patch.
func genMbox(topics int) []byte {
	var body strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&body, "Explain the change some more, line %d of the commit message.\n", i)
	}
	var diff strings.Builder
	diff.WriteString(" fs/demo/a.c | 10 +++++-----\n 1 file changed, 5 insertions(+), 5 deletions(-)\n\n" +
		"diff --git a/fs/demo/a.c b/fs/demo/a.c\nindex 0123456..89abcde 100644\n--- a/fs/demo/a.c\n+++ b/fs/demo/a.c\n")
	for h := 0; h < 5; h++ {
		fmt.Fprintf(&diff, "@@ -%d,7 +%d,7 @@ static int demo_fn(void)\n", h*50+1, h*50+1)
		for l := 0; l < 3; l++ {
			diff.WriteString(" \tcontext_line(cache, entry, block);\n")
		}
		diff.WriteString("-\twait_event(cache->wait_queue, cache->unused);\n+\twait_event_exclusive(cache->wait_queue, cache->unused);\n")
		for l := 0; l < 3; l++ {
			diff.WriteString(" \tcontext_line(cache, entry, block);\n")
		}
	}
	var b bytes.Buffer
	hdr := func(id, subj, irt string, refs ...string) {
		fmt.Fprintf(&b, "From dev@example.org Mon Nov  2 10:00:00 2026\nFrom: Dev %d <dev@example.org>\n"+
			"To: linux-kernel@vger.kernel.org\nCc: maintainer@example.org, list@example.org\n"+
			"Subject: %s\nDate: Mon, 2 Nov 2026 10:00:00 +0000\nMessage-ID: <%s>\n", len(id), subj, id)
		if irt != "" {
			fmt.Fprintf(&b, "In-Reply-To: <%s>\nReferences: <%s>\n", irt, strings.Join(refs, "> <"))
		}
		b.WriteString("MIME-Version: 1.0\nContent-Type: text/plain; charset=UTF-8\nContent-Transfer-Encoding: 8bit\n\n")
	}
	for t := 0; t < topics; t++ {
		for v := 1; v <= 2; v++ {
			tag := "PATCH"
			if v > 1 {
				tag = fmt.Sprintf("PATCH v%d", v)
			}
			cover := fmt.Sprintf("t%d-v%d-0@gen", t, v)
			v1cover := fmt.Sprintf("t%d-v1-0@gen", t)
			if v == 1 {
				hdr(cover, fmt.Sprintf("[%s 0/3] demo: topic %d", tag, t), "")
			} else {
				hdr(cover, fmt.Sprintf("[%s 0/3] demo: topic %d", tag, t), v1cover, v1cover)
			}
			b.WriteString(body.String() + "\n")
			for p := 1; p <= 3; p++ {
				id := fmt.Sprintf("t%d-v%d-%d@gen", t, v, p)
				refs := []string{cover}
				if v > 1 {
					refs = []string{v1cover, cover}
				}
				hdr(id, fmt.Sprintf("[%s %d/3] demo: part %d of topic %d", tag, p, p, t), cover, refs...)
				b.WriteString(body.String() + "\nSigned-off-by: Dev <dev@example.org>\n---\n" + diff.String() + "-- \n2.47.3\n\n")
			}
			hdr(fmt.Sprintf("t%d-v%d-r@gen", t, v), fmt.Sprintf("Re: [%s 2/3] demo: part 2 of topic %d", tag, t),
				fmt.Sprintf("t%d-v%d-2@gen", t, v), cover, fmt.Sprintf("t%d-v%d-2@gen", t, v))
			b.WriteString("> quoted\n\nReviewed-by: Dev 13 <dev@example.org>\n\n")
		}
	}
	return b.Bytes()
}

func parseAndAssemble(tb testing.TB, mbox []byte) []*Series {
	msgs := make([]*Message, 0, 1024)
	err := ReadMbox(bytes.NewReader(mbox), func(raw []byte, _ int64) error {
		m, err := ParseBytes(raw)
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return Assemble(msgs)
}

// BenchmarkParseAssemble reads, parses and assembles a 50,000-mail mbox;
// MB/s is the figure docs/mailbox.md reports.
func BenchmarkParseAssemble(b *testing.B) {
	mbox := genMbox(5000)
	series := parseAndAssemble(b, mbox)
	if len(series) != 5000 || series[0].Version != 2 || !series[0].Complete {
		b.Fatalf("generated mbox assembled into %d series (first v%d)", len(series), series[0].Version)
	}
	b.SetBytes(int64(len(mbox)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		parseAndAssemble(b, mbox)
	}
	b.ReportMetric(50000, "mails/op")
}

// BenchmarkThread is the seed thread (patch, ping, review) from file to
// series, as "b4 am" does it; compare with BenchmarkB4Thread.
func BenchmarkThread(b *testing.B) {
	for b.Loop() {
		data, err := os.ReadFile("../testdata/mbox/squashfs-thundering-herd.mbox")
		if err != nil {
			b.Fatal(err)
		}
		s := parseAndAssemble(b, data)
		var out bytes.Buffer
		s[0].WriteMbox(&out)
	}
}

// BenchmarkB4Thread runs "b4 am --offline-mode" on the same thread.
func BenchmarkB4Thread(b *testing.B) {
	b4 := testenv.Tool(b, "b4")
	home := b.TempDir()
	for b.Loop() {
		if ids := b4Patches(b, b4, home, "../testdata/mbox/squashfs-thundering-herd.mbox"); len(ids) != 1 {
			b.Fatalf("b4 found %d patches", len(ids))
		}
	}
}

func TestGeneratedMbox(t *testing.T) {
	// The benchmark's input, small: every topic is one complete v2 series
	// whose 2/3 keeps the v1 review (same diff).
	series := parseAndAssemble(t, genMbox(20))
	if len(series) != 20 {
		t.Fatalf("%d series", len(series))
	}
	for _, s := range series {
		if s.Version != 2 || !s.Complete || len(s.Patches) != 3 || len(s.Patches[1].Trailers) != 1 {
			t.Fatalf("series %q: v%d complete %v, %d patches", s.Title, s.Version, s.Complete, len(s.Patches))
		}
	}
}
