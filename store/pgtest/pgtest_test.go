package pgtest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/internal/testenv"
)

func TestStart(t *testing.T) {
	s := Start(t)
	out, err := exec.Command(testenv.Tool(t, "psql"), s.DSN("postgres"), "-Atc", "select current_user || ' ' || host(inet_server_addr())").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "patchbot 127.0.0.1" {
		t.Errorf("server says %q, want the patchbot superuser on loopback", got)
	}
}
