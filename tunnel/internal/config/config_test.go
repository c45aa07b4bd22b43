package config

import (
	"flag"
	"testing"
)

// The default reader is io_uring at the UE end only; an explicit setting wins at either end.
func TestTUNReaderDefaultByRole(t *testing.T) {
	for _, c := range []struct {
		args []string
		ring bool
	}{
		{[]string{"--role", "ue"}, true},
		{[]string{"--role", "mec"}, false},
		{[]string{"--role", "ue", "--tun-reader", "read"}, false},
		{[]string{"--role", "mec", "--tun-reader", "io_uring"}, true},
	} {
		cfg, err := Load(flag.NewFlagSet("t", flag.ContinueOnError), c.args)
		if err != nil {
			t.Fatal(c.args, err)
		}
		if got := cfg.ringReader(); got != c.ring {
			t.Errorf("%v: io_uring %v, want %v", c.args, got, c.ring)
		}
	}
}
