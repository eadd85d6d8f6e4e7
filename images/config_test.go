package images

import (
	"reflect"
	"strings"
	"testing"
)

func TestCheckConfig(t *testing.T) {
	final := strings.Join([]string{
		"CONFIG_SMP=y",
		"CONFIG_NR_CPUS=64",
		"# CONFIG_MODULES is not set",
		"# CONFIG_KERNEL_XZ is not set",
	}, "\n")
	tests := []struct {
		name     string
		fragment string
		want     []Dropped
	}{
		{"all kept", "CONFIG_SMP=y\nCONFIG_NR_CPUS=64\n# CONFIG_KERNEL_XZ is not set\n", nil},
		{"unset may be absent", "# CONFIG_DRM is not set\n", nil},
		{"comments ignored", "# CONFIG_MODULES even with no module built\nCONFIG_SMP=y\n", nil},
		{"turned off", "CONFIG_MODULES=y\n", []Dropped{{"CONFIG_MODULES", "y", "n"}}},
		{"absent", "CONFIG_DRM_I915=y\n", []Dropped{{"CONFIG_DRM_I915", "y", ""}}},
		{"other value", "CONFIG_NR_CPUS=128\n", []Dropped{{"CONFIG_NR_CPUS", "128", "64"}}},
		{"later line wins", "CONFIG_NR_CPUS=128\nCONFIG_NR_CPUS=64\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckConfig([]Fragment{{Name: "t.config", Data: []byte(tt.fragment)}}, []byte(final))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CheckConfig = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	var all strings.Builder
	for _, f := range c.Fragments {
		all.Write(f.Data)
	}
	// The options the guest agent and the suites cannot do without.
	for _, opt := range []string{"CONFIG_SMP=y", "CONFIG_NR_CPUS=64", "CONFIG_SERIAL_8250_CONSOLE=y",
		"CONFIG_BLK_DEV_INITRD=y", "CONFIG_SQUASHFS_DECOMP_MULTI_PERCPU=y", "CONFIG_KPROBE_EVENTS=y",
		"CONFIG_MODULES=y", "CONFIG_SCHEDSTATS=y", "CONFIG_FUSE_FS=y", "CONFIG_VIRTIO_CONSOLE=y",
		// what a real kernel reports, and what decodes its traces
		"CONFIG_BUG=y", "CONFIG_DEBUG_BUGVERBOSE=y", "CONFIG_SOFTLOCKUP_DETECTOR=y", "CONFIG_DETECT_HUNG_TASK=y",
		"CONFIG_PANIC_ON_OOPS=y", "CONFIG_DEBUG_INFO_DWARF_TOOLCHAIN_DEFAULT=y"} {
		if !strings.Contains(all.String(), opt+"\n") {
			t.Errorf("default config lacks %s", opt)
		}
	}
	if !reflect.DeepEqual(c.MakeVars, []string{"KCFLAGS=-fno-optimize-sibling-calls -g1"}) {
		t.Errorf("MakeVars = %v", c.MakeVars)
	}
	d := DefaultConfig()
	d.MakeVars = nil
	if c.Hash() == d.Hash() {
		t.Error("make variables are not part of the config hash")
	}
}
