package vmrunner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
				dir, err := os.MkdirTemp("", "patchbot-bench-")
				if err != nil {
					b.Fatal(err)
				}
				os.Chmod(dir, 0o711) // libvirt's QEMU user passes through
				defer os.RemoveAll(dir)
				p, err := New(backend, Config{WorkDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

// BenchmarkBootPaths measures launch → agent ready for the old boot path
// (BootLegacy: pc machine, bzImage, PCI, ACPI) against the new (BootPVH:
// microvm, the vmlinux at its PVH entry, virtio-mmio), b.N boots of each,
// alternated (which path goes first alternates too), in one sitting, and
// reports the minimum, median and maximum of each. On this machine:
//
//	flock /tmp/patchbot-heavy.lock go test -run '^$' -bench BootPaths -benchtime 10x ./vmrunner/
func BenchmarkBootPaths(b *testing.B) {
	k := minimalKernel(b)
	if k.vmlinux == "" {
		b.Skip("the default kernel's build keeps no vmlinux")
	}
	needQEMU(b)
	shapes := []struct{ cpus, mem int }{{1, 512}, {4, 1024}}
	for _, backend := range []string{"qemu", "libvirt"} {
		for _, shape := range shapes {
			b.Run(fmt.Sprintf("%s/cpus=%d", backend, shape.cpus), func(b *testing.B) {
				if backend == "libvirt" {
					needLibvirtd(b)
				}
				paths := []string{BootLegacy, BootPVH}
				pools := map[string]Pool{}
				for _, boot := range paths {
					dir, err := os.MkdirTemp("", "patchbot-bench-")
					if err != nil {
						b.Fatal(err)
					}
					os.Chmod(dir, 0o711) // libvirt's QEMU user passes through
					defer os.RemoveAll(dir)
					p, err := New(backend, Config{Boot: boot, WorkDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
					if err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					pools[boot] = p
				}
				times := map[string][]time.Duration{}
				for i := 0; i < b.N; i++ {
					for j := range paths {
						boot := paths[(i+j)%len(paths)]
						vm, err := pools[boot].Create(context.Background(), Spec{Kernel: k.bzImage, Initramfs: k.initramfs, CPUs: shape.cpus, MemMiB: shape.mem})
						if err != nil {
							b.Fatal(err)
						}
						info, err := vm.Boot(context.Background())
						if err != nil {
							b.Fatalf("Boot %s: %v\n%s", boot, err, vm.Console())
						}
						if info.Boot != boot {
							b.Fatalf("asked for %s, booted %s", boot, info.Boot)
						}
						if boot == BootPVH && i == 0 {
							b.Logf("reproduce: %s", info.Repro)
						}
						times[boot] = append(times[boot], info.BootDuration)
						vm.Do(context.Background(), proto.Request{Op: proto.OpPowerOff}, nil)
						vm.Close()
					}
				}
				for _, boot := range paths {
					ds := times[boot]
					slices.Sort(ds)
					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
					b.ReportMetric(ms(ds[0]), boot+"-min-ms")
					med := ds[len(ds)/2]
					if len(ds)%2 == 0 {
						med = (ds[len(ds)/2-1] + med) / 2
					}
					b.ReportMetric(ms(med), boot+"-median-ms")
					b.ReportMetric(ms(ds[len(ds)-1]), boot+"-max-ms")
					b.Logf("%s: %v", boot, ds)
				}
			})
		}
	}
}
