package images

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestSandbox(t *testing.T) {
	needTools(t)
	sb, err := newSandbox()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	run := func(t *testing.T, ctx context.Context, argv ...string) (string, error) {
		var out bytes.Buffer
		err := sb.run(ctx, &out, "/", env, nil, argv...)
		return out.String(), err
	}
	t.Run("no network", func(t *testing.T) {
		out, err := run(t, context.Background(), "cat", "/proc/net/dev")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, line := range strings.Split(out, "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && name != "lo" {
				t.Errorf("interface %q visible in the build's network namespace", name)
			}
		}
	})
	t.Run("unprivileged", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("only a root patchbot drops to the build user")
		}
		out, err := run(t, context.Background(), "id", "-u")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if strings.TrimSpace(out) == "0" {
			t.Error("build commands run as root")
		}
		if _, err := run(t, context.Background(), "touch", "/etc/patchbot-sandbox-test"); err == nil {
			os.Remove("/etc/patchbot-sandbox-test")
			t.Error("build user could write to /etc")
		}
	})
	t.Run("canceled", func(t *testing.T) {
		// SIGINT to patchbot cancels the context: the machine's doing, so
		// not an exit status that would read as a failed build.
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		if _, err := run(t, ctx, "sleep", "60"); err != context.Canceled {
			t.Errorf("error = %v, want context.Canceled", err)
		}
	})
	t.Run("time limit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := run(t, ctx, "sh", "-c", "sleep 60 & sleep 60")
		if err != errTimeout {
			t.Errorf("error = %v, want the time limit", err)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("stopping took %s", d)
		}
	})
}
