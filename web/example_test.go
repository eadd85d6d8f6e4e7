package web_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/patchbot/patchbot/web"
)

// The dashboard of a state directory, as `patchbot serve --state DIR`
// serves it: runs only, no queue, no form.
func ExampleNew() {
	state, err := os.MkdirTemp("", "patchbot-state-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(state)
	h, err := web.New(web.Options{StateDir: state, BaseURL: "https://patchbot.example.org"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", h) // beside /metrics and /healthz in patchbot watch
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/api/runs", nil))
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println(web.RunURL("https://patchbot.example.org", "job-12"))
	// Output:
	// 200 application/json
	// https://patchbot.example.org/runs/job-12/
}
