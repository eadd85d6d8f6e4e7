package vmrunner

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// BenchmarkBoot measures launch → agent ready (the boot-ms metric) for
// each backend and kernel, then powers off. Under TCG on this machine:
//
//	go test -run '^$' -bench Boot -benchtime 5x ./vmrunner/
func BenchmarkBoot(b *testing.B) {
	kernels := []struct {
		name string
		get  func(testing.TB) kernel
	}{
		{"minimal", minimalKernel},
		{"debian", debianKernel},
	}
	for _, backend := range []string{"qemu", "libvirt"} {
		for _, kk := range kernels {
			b.Run(backend+"/"+kk.name, func(b *testing.B) {
				k := kk.get(b)
				needQEMU(b)
				if backend == "libvirt" {
					needLibvirtd(b)
				}
				p, err := New(backend, Config{WorkDir: b.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				var total time.Duration
				for i := 0; i < b.N; i++ {
					vm, err := p.Create(context.Background(), Spec{Kernel: k.bzImage, Initramfs: k.initramfs, MemMiB: 256})
					if err != nil {
						b.Fatal(err)
					}
					info, err := vm.Boot(context.Background())
					if err != nil {
						b.Fatalf("Boot: %v", err)
					}
					total += info.BootDuration
					vm.Do(context.Background(), proto.Request{Op: proto.OpPowerOff}, nil)
					vm.Close()
				}
				b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "boot-ms")
			})
		}
	}
}
