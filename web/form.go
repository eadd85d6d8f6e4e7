package web

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/patchbot/patchbot/mailbox"
	"github.com/patchbot/patchbot/suites"
)

// The form to start a run. Three things must hold for a run to be queued:
// the request is same-origin (http.CrossOriginProtection, in routes), it
// carries the CSRF value this server gave the browser with the form (a
// cookie and a hidden field that must match and be signed by this
// process), and it carries the token from the config. The token is typed
// on the form each time and never kept in a cookie, so a forged request
// from another site has nothing to ride on.

const (
	csrfCookie = "patchbot_csrf"
	csrfMaxAge = 2 * time.Hour
	// formOverhead is what a multipart form may carry beside the mbox.
	formOverhead = 64 << 10
)

// csrfKeys signs CSRF values; the key lives only in this process, so a
// restart asks for the form to be loaded again.
type csrfKeys struct{ key []byte }

func newCSRFKeys() *csrfKeys {
	k := make([]byte, 32)
	rand.Read(k)
	return &csrfKeys{key: k}
}

// issue returns a fresh value: random nonce, time, and their MAC.
func (c *csrfKeys) issue(now time.Time) string {
	nonce := make([]byte, 16)
	rand.Read(nonce)
	msg := base64.RawURLEncoding.EncodeToString(nonce) + "." + strconv.FormatInt(now.Unix(), 10)
	return msg + "." + c.mac(msg)
}

func (c *csrfKeys) mac(msg string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// valid checks a value this process issued less than csrfMaxAge ago.
func (c *csrfKeys) valid(v string, now time.Time) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || len(v) > 200 {
		return false
	}
	msg, sig := v[:i], v[i+1:]
	if !hmac.Equal([]byte(sig), []byte(c.mac(msg))) {
		return false
	}
	j := strings.LastIndexByte(msg, '.')
	issued, err := strconv.ParseInt(msg[j+1:], 10, 64)
	if j < 0 || err != nil {
		return false
	}
	age := now.Sub(time.Unix(issued, 0))
	return age >= -time.Minute && age < csrfMaxAge
}

func (s *server) formOn() bool { return s.o.Token != "" && s.o.Queue != nil }

// FormView is the form's page.
type FormView struct {
	On       bool
	CSRF     string
	Suites   []string
	Profiles []string
	MaxMiB   int64
	Error    string
	// Values typed before an error, shown again.
	Lore, MessageID, Submitter, Profile string
	Chosen                              map[string]bool
}

func (s *server) formView() *FormView {
	v := &FormView{On: s.formOn(), MaxMiB: max(1, s.o.MaxUpload>>20), Chosen: map[string]bool{}}
	v.Suites, v.Profiles = knownSuites()
	return v
}

// knownSuites are the suites that can be asked for and their profiles.
func knownSuites() (names, profiles []string) {
	names, profiles = suites.Names()
	if names == nil {
		return nil, []string{suites.DefaultProfile, suites.QuickProfile, "full"}
	}
	sort.Strings(profiles)
	return names, profiles
}

func (s *server) submitForm(w http.ResponseWriter, r *http.Request) {
	v := s.formView()
	if v.On {
		v.CSRF = s.csrf.issue(time.Now())
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v.CSRF, Path: "/submit", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, MaxAge: int(csrfMaxAge.Seconds()), Secure: r.TLS != nil})
	}
	w.Header().Set("Cache-Control", "no-store")
	s.html(w, r, "submit", "start a run", v)
}

// formError answers a refused form with the form again and what was wrong.
func (s *server) formError(w http.ResponseWriter, r *http.Request, code int, v *FormView, msg string) {
	v.Error = msg
	if v.On {
		v.CSRF = s.csrf.issue(time.Now())
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v.CSRF, Path: "/submit", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, MaxAge: int(csrfMaxAge.Seconds()), Secure: r.TLS != nil})
	}
	var buf bytes.Buffer
	if err := renderPage(&buf, "submit", "start a run", v); err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write(buf.Bytes())
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	v := s.formView()
	if !v.On {
		s.formError(w, r, http.StatusForbidden, v, "Starting runs from the dashboard is off: the config gives no token.")
		return
	}
	limit := s.o.MaxUpload + formOverhead
	if r.ContentLength > limit {
		s.formError(w, r, http.StatusRequestEntityTooLarge, v, fmt.Sprintf("The upload is larger than %d MiB.", v.MaxMiB))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.formError(w, r, http.StatusRequestEntityTooLarge, v, fmt.Sprintf("The upload is larger than %d MiB.", v.MaxMiB))
			return
		}
		if !errors.Is(err, http.ErrNotMultipart) {
			s.formError(w, r, http.StatusBadRequest, v, "The form could not be read: "+err.Error())
			return
		}
		if err := r.ParseForm(); err != nil {
			s.formError(w, r, http.StatusBadRequest, v, "The form could not be read: "+err.Error())
			return
		}
	}
	if r.MultipartForm != nil {
		defer r.MultipartForm.RemoveAll()
	}
	v.Lore, v.MessageID = r.PostFormValue("lore"), r.PostFormValue("msgid")
	v.Submitter, v.Profile = r.PostFormValue("submitter"), r.PostFormValue("profile")
	for _, name := range r.PostForm["suite"] {
		v.Chosen[name] = true
	}

	cookie, err := r.Cookie(csrfCookie)
	field := r.PostFormValue("csrf")
	if err != nil || field == "" || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(field)) != 1 ||
		!s.csrf.valid(field, time.Now()) {
		s.formError(w, r, http.StatusForbidden, v, "The form expired or did not come from this page: it is shown again, try once more.")
		return
	}
	if !s.tokenOK(r.PostFormValue("token")) {
		s.formError(w, r, http.StatusForbidden, v, "Wrong token.")
		return
	}
	var mbox []byte
	if f, fh, err := r.FormFile("mbox"); err == nil {
		defer f.Close()
		if fh.Size > s.o.MaxUpload {
			s.formError(w, r, http.StatusRequestEntityTooLarge, v, fmt.Sprintf("The mbox is larger than %d MiB.", v.MaxMiB))
			return
		}
		mbox, err = io.ReadAll(io.LimitReader(f, s.o.MaxUpload+1))
		if err != nil || int64(len(mbox)) > s.o.MaxUpload {
			s.formError(w, r, http.StatusRequestEntityTooLarge, v, fmt.Sprintf("The mbox is larger than %d MiB.", v.MaxMiB))
			return
		}
	}
	sub, err := s.checkSubmission(v.Lore, v.MessageID, mbox, r.PostForm["suite"], v.Profile, v.Submitter)
	if err != nil {
		s.formError(w, r, http.StatusBadRequest, v, err.Error())
		return
	}
	id, code, err := s.queue(r.Context(), sub)
	if err != nil {
		s.log.Warn("dashboard: submission not queued", "err", err, "submitter", sub.Submitter)
		s.formError(w, r, code, v, "Not queued: "+err.Error())
		return
	}
	s.log.Info("dashboard: run queued", "job", id, "submitter", sub.Submitter)
	http.Redirect(w, r, "/jobs/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
}

// apiSubmit queues a run from JSON, with the token as a bearer token:
//
//	curl -H "Authorization: Bearer $TOKEN" -d '{"message_id": "..."}' .../api/submit
type apiSubmission struct {
	LoreURL   string   `json:"lore_url"`
	MessageID string   `json:"message_id"`
	Mbox      string   `json:"mbox"`
	Suites    []string `json:"suites"`
	Profile   string   `json:"profile"`
	Submitter string   `json:"submitter"`
}

func (s *server) apiSubmit(w http.ResponseWriter, r *http.Request) {
	if !s.formOn() {
		httpError(w, r, http.StatusForbidden, "starting runs from the dashboard is off: the config gives no token")
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !s.tokenOK(token) {
		httpError(w, r, http.StatusForbidden, "wrong or missing token (Authorization: Bearer TOKEN)")
		return
	}
	limit := s.o.MaxUpload*2 + formOverhead // JSON escapes may double the mbox
	if r.ContentLength > limit {
		httpError(w, r, http.StatusRequestEntityTooLarge, "request too large")
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	var req apiSubmission
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			httpError(w, r, http.StatusRequestEntityTooLarge, "request too large")
			return
		}
		httpError(w, r, http.StatusBadRequest, "decoding the request: "+err.Error())
		return
	}
	if int64(len(req.Mbox)) > s.o.MaxUpload {
		httpError(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the mbox is larger than %d bytes", s.o.MaxUpload))
		return
	}
	sub, err := s.checkSubmission(req.LoreURL, req.MessageID, []byte(req.Mbox), req.Suites, req.Profile, req.Submitter)
	if err != nil {
		httpError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	id, code, err := s.queue(r.Context(), sub)
	if err != nil {
		httpError(w, r, code, "not queued: "+err.Error())
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"job_id": id, "url": s.link("/jobs/" + strconv.FormatInt(id, 10))})
}

// queue hands a checked submission to the queue, and says what status
// answers a failure: 422 when the queue refused the run (ErrRefused), 500
// when it could not take it.
func (s *server) queue(ctx context.Context, sub Submission) (int64, int, error) {
	id, err := s.o.Queue.Submit(ctx, sub)
	if err == nil {
		return id, 0, nil
	}
	if errors.Is(err, ErrRefused) {
		return 0, http.StatusUnprocessableEntity, err
	}
	return 0, http.StatusInternalServerError, err
}

func (s *server) tokenOK(got string) bool {
	// Compare digests so that the time taken says nothing of the length.
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.o.Token))
	return s.o.Token != "" && subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// checkSubmission checks what a form or API request asks for; the content
// (is there a series, does it apply) is the queue's to judge.
func (s *server) checkSubmission(lore, msgid string, mbox []byte, suiteNames []string, profile, submitter string) (Submission, error) {
	lore, msgid = strings.TrimSpace(lore), strings.Trim(strings.TrimSpace(msgid), "<>")
	n := 0
	for _, set := range []bool{lore != "", msgid != "", len(mbox) > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Submission{}, errors.New("give exactly one of a lore URL, a Message-ID or an mbox file")
	}
	sub := Submission{LoreURL: lore, MessageID: msgid, Mbox: mbox, Profile: profile, Submitter: "dashboard"}
	switch {
	case lore != "":
		u, err := url.Parse(lore)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || len(lore) > 2048 {
			return Submission{}, errors.New("the lore URL must be an http(s) URL of a thread, e.g. https://lore.kernel.org/all/MESSAGE-ID/")
		}
		// The daemon fetches what is named here: only the archives it is
		// told of, never an address of the operator's network.
		if !contains(s.o.LoreHosts, strings.ToLower(u.Host)) {
			return Submission{}, fmt.Errorf("the lore URL must be on %s", strings.Join(s.o.LoreHosts, " or "))
		}
	case msgid != "":
		if len(msgid) > 250 || !strings.Contains(msgid, "@") || strings.IndexFunc(msgid, func(r rune) bool {
			return r <= ' ' || r > '~' || r == '<' || r == '>'
		}) >= 0 {
			return Submission{}, errors.New("the Message-ID must look like local@domain, printable, without spaces")
		}
	default:
		count := 0
		err := mailbox.ReadMbox(bytes.NewReader(mbox), func(raw []byte, _ int64) error {
			if count == 0 {
				m, err := mailbox.ParseBytes(raw)
				if err != nil {
					return err
				}
				if m.From == "" && m.Subject == "" {
					return errors.New("no mail headers")
				}
			}
			count++
			return nil
		})
		if err != nil || count == 0 {
			return Submission{}, errors.New("the file is not an mbox of mails (or one mail with its headers)")
		}
	}
	known, profiles := knownSuites()
	for _, name := range suiteNames {
		if name == "" {
			continue
		}
		if !contains(known, name) {
			return Submission{}, fmt.Errorf("unknown suite %q (known: %s)", name, strings.Join(known, ", "))
		}
		sub.Suites = append(sub.Suites, name)
	}
	if profile != "" && !contains(profiles, profile) {
		return Submission{}, fmt.Errorf("unknown profile %q (known: %s)", profile, strings.Join(profiles, ", "))
	}
	if submitter = strings.TrimSpace(submitter); submitter != "" {
		if len(submitter) > 200 || strings.IndexFunc(submitter, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return Submission{}, errors.New("the name must be printable and at most 200 bytes")
		}
		sub.Submitter = submitter
	}
	return sub, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
