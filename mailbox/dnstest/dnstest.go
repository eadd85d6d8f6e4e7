// Package dnstest serves DNS TXT records on loopback for tests: the DKIM
// keys of test domains (selector._domainkey.domain), for patchbot's
// verifier and for a receiving mail server (opendkim) in the same test.
//
//	dns := dnstest.Start(t)
//	dns.SetTXT("key1._domainkey.linux.dev", "v=DKIM1; k=rsa; p=...")
//	cfg.DKIM.DNS = dns.Addr
//
// It answers on UDP and TCP on one port; a name it does not hold is
// NXDOMAIN. It is authoritative for everything: there is no recursion.
package dnstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server is a DNS server on 127.0.0.1.
type Server struct {
	Addr string // 127.0.0.1:port, UDP and TCP

	mu      sync.Mutex
	txt     map[string][]string
	queries map[string]int

	udp *net.UDPConn
	tcp *net.TCPListener
	wg  sync.WaitGroup
}

// Start serves until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{txt: map[string][]string{}, queries: map[string]int{}}
	// One port for both: find a UDP port whose TCP twin is free.
	for try := 0; ; try++ {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			udp.Close()
			if try < 20 {
				continue
			}
			t.Fatal(err)
		}
		s.udp, s.tcp, s.Addr = udp, tcp, udp.LocalAddr().String()
		break
	}
	s.wg.Add(2)
	go s.serveUDP()
	go s.serveTCP()
	t.Cleanup(func() {
		s.udp.Close()
		s.tcp.Close()
		s.wg.Wait()
	})
	return s
}

// SetTXT sets the TXT records of a name (no records: the name is gone,
// as a rotated key is).
func (s *Server) SetTXT(name string, records ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := canonical(name)
	if len(records) == 0 {
		delete(s.txt, key)
		return
	}
	s.txt[key] = records
}

// Queries is how many queries asked for a name.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[canonical(name)]
}

func canonical(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) + "." }

func (s *Server) serveUDP() {
	defer s.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := s.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if out, err := s.answer(buf[:n], 512); err == nil {
			s.udp.WriteToUDP(out, from)
		}
	}
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.tcp.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			for {
				var n uint16
				if binary.Read(c, binary.BigEndian, &n) != nil {
					return
				}
				q := make([]byte, n)
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				out, err := s.answer(q, 65535)
				if err != nil {
					return
				}
				c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
			}
		}()
	}
}

// answer builds the response to one query, truncated (TC set, no
// answers) when it does not fit in max bytes.
func (s *Server) answer(query []byte, max int) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, errors.New("no question")
	}
	name := canonical(q.Name.String())
	s.mu.Lock()
	s.queries[name]++
	records, ok := s.txt[name]
	s.mu.Unlock()
	resp := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true}
	var answers []dnsmessage.Resource
	switch {
	case !ok:
		resp.RCode = dnsmessage.RCodeNameError
	case q.Type == dnsmessage.TypeTXT:
		for _, r := range records {
			answers = append(answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET, TTL: 60},
				Body:   &dnsmessage.TXTResource{TXT: chunks(r)}})
		}
	}
	out, err := build(resp, q, answers)
	if err == nil && len(out) > max {
		resp.Truncated = true
		out, err = build(resp, q, nil)
	}
	return out, err
}

func build(h dnsmessage.Header, q dnsmessage.Question, answers []dnsmessage.Resource) ([]byte, error) {
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range answers {
		if err := b.TXTResource(a.Header, *a.Body.(*dnsmessage.TXTResource)); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// chunks splits a record into the 255-byte strings a TXT record holds; a
// reader joins them again.
func chunks(r string) []string {
	var out []string
	for len(r) > 255 {
		out = append(out, r[:255])
		r = r[255:]
	}
	return append(out, r)
}
