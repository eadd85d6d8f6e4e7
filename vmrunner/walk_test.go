package vmrunner

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/patchbot/patchbot/vmrunner/report"
)

// memMonitor answers the monitor's memory dumps ("x /Ngx ADDR") from a
// map of bytes, one word a line as QEMU's lines start; unreadable is an
// address whose dumps fail.
type memMonitor struct {
	mem        map[uint64]byte
	unreadable uint64
}

func (m *memMonitor) hmp(_ context.Context, cmd string) (string, error) {
	var n int
	var addr uint64
	if _, err := fmt.Sscanf(cmd, "x /%dgx 0x%x", &n, &addr); err != nil {
		return "", fmt.Errorf("unexpected command %q", cmd)
	}
	if addr == m.unreadable {
		return "", errors.New("cannot access memory")
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		var word [8]byte
		for j := range word {
			word[j] = m.mem[addr+uint64(8*i+j)]
		}
		fmt.Fprintf(&b, "%016x: 0x%016x\n", addr+uint64(8*i), binary.LittleEndian.Uint64(word[:]))
	}
	return b.String(), nil
}

func (m *memMonitor) put(addr uint64, b ...byte) {
	for i, c := range b {
		m.mem[addr+uint64(i)] = c
	}
}

func (m *memMonitor) putWord(addr, w uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	m.put(addr, b[:]...)
}

// putCall writes a direct call of target whose return address is ret.
func (m *memMonitor) putCall(ret, target uint64) {
	var b [5]byte
	b[0] = 0xe8
	binary.LittleEndian.PutUint32(b[1:], uint32(int32(int64(target-ret))))
	m.put(ret-5, b[:]...)
}

// A vCPU stopped where its function has no frame of its own (a leaf, or
// a prologue before `mov %rsp,%rbp`) would lose its caller from the walk
// by frame pointers: the caller is taken from the top of the stack when
// the call before that word entered the function. Seen in a CI run
// (2026-12-07): a vCPU in the leaf cpuidle_not_available whose walk
// skipped do_idle.
func TestWalkFramesWithoutAFrame(t *testing.T) {
	const (
		fn     = 0xffffffff81000100 // the function stopped in
		caller = 0xffffffff81000550 // its return address, into its caller
		grand  = 0xffffffff81000990 // the caller's
		other  = 0xffffffff81000a00 // a function elsewhere
		rsp    = 0xffffc90000001e00
		rbp    = 0xffffc90000001f00 // the caller's frame
		own    = 0xffffc90000001e10 // the function's own frame, once made
	)
	for _, tc := range []struct {
		name   string
		rip    uint64
		rbp    uint64
		top    []uint64 // the words from RSP up
		callTo uint64   // what the call before caller's return calls (0: an indirect call)
		want   []uint64
	}{
		{"in a leaf", fn + 0x10, rbp, []uint64{caller}, fn, []uint64{fn + 0x10, caller, grand}},
		{"at a prologue's push", fn, rbp, []uint64{caller}, fn, []uint64{fn, caller, grand}},
		{"after the push", fn + 1, rbp, []uint64{rbp, caller}, fn, []uint64{fn + 1, caller, grand}},
		// Past the prologue RBP is the function's own frame, whose return
		// address is the caller: it is not shown twice.
		{"past the prologue", fn + 0x20, own, []uint64{0x1234, caller}, fn, []uint64{fn + 0x20, caller, grand}},
		{"the word is an indirect call's return", fn + 0x10, rbp, []uint64{caller}, 0, []uint64{fn + 0x10, grand}},
		{"the call was of another function", fn + 0x10, rbp, []uint64{caller}, other, []uint64{fn + 0x10, grand}},
		{"the top is data", fn + 0x10, rbp, []uint64{0x1234, caller}, fn, []uint64{fn + 0x10, grand}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &memMonitor{mem: map[uint64]byte{}}
			m.putWord(rbp, 0) // the chain ends above the caller's frame
			m.putWord(rbp+8, grand)
			m.putWord(own, rbp)
			m.putWord(own+8, caller)
			for i, w := range tc.top {
				m.putWord(rsp+uint64(8*i), w)
			}
			if tc.callTo != 0 {
				m.putCall(caller, tc.callTo)
			} else {
				m.put(caller-3, 0x41, 0xff, 0xd3) // call *%r11
			}
			stack, ended := walkFrames(context.Background(), m, report.Registers{RIP: tc.rip, RSP: rsp, RBP: tc.rbp})
			var got []uint64
			for _, f := range stack {
				got = append(got, f.PC)
			}
			if ended != "" || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("walk %x (ended %q), want %x", got, ended, tc.want)
			}
		})
	}
}
