// Package config reads the tunnel's settings: TUNNEL_* environment variables, overridden by
// command-line flags of the same name (TUNNEL_SCHEDULER = --scheduler).
package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/svc"
	"mts.invalid/suite/tunnel/internal/engine"
	"mts.invalid/suite/tunnel/internal/path"
	"mts.invalid/suite/tunnel/internal/sched"
	"mts.invalid/suite/tunnel/internal/wire"
)

// Prefix of the environment variables.
const Prefix = "TUNNEL_"

// Config is everything `tunnel serve` needs.
type Config struct {
	svc.Common

	Role, PSKHex, PSKFile string
	PeerID                int
	TUN, TUNReader        string
	MTU                   int
	PathsJSON             string
	Queue                 string
	QueueLimit            int
	Target, Interval      time.Duration
	Flows, Quantum        int
	Scheduler, CwndMode   string
	CwndBytes             int
	CwndTarget            time.Duration
	ReorderTimeout        time.Duration
	ProbeInterval         time.Duration
	SchedSliceUS          int

	AMQPURL, RnisExchange string
	BacklogExchange       string
	BacklogUE             string
	BacklogInterval       time.Duration
}

func (c *Config) settings() []svc.Setting {
	api := c.APISettings("tunnel", "/tunnel/v1 API", "8105", "")
	return append(append(api, []svc.Setting{
		svc.Var("ROLE", "mec", "which end this is: ue (the UE's agent) or mec (the MEC host's end); the two ends' keys differ by it", svc.OneOf(&c.Role, "ue", "mec")),
		svc.Var("PEER_ID", "1", "the UE this tunnel serves (uint32, in the full header of probes and acks; selects the pre-shared key)", svc.Int(&c.PeerID)),
		svc.Var("PSK", "", "pre-shared key of this UE, hex, at least 16 bytes (or PSK_FILE); required: there is no open tunnel", svc.Str(&c.PSKHex)),
		svc.Var("PSK_FILE", "", "file holding the hex pre-shared key", svc.Str(&c.PSKFile)),
		svc.Var("TUN", "mptun0", "TUN device (created if absent; addresses and routes are the operator's)", svc.Str(&c.TUN)),
		svc.Var("TUN_READER", "auto", "how the TUN is read: read (Go's poller, then read(2) until it is empty), io_uring (one multishot read in an io_uring: one io_uring_enter takes every frame waiting; where io_uring is refused, e.g. by a container's seccomp profile, read runs and the log says why; /stats tunReader says which runs) or auto: io_uring at the UE end (ROLE=ue), read at the MEC end", svc.OneOf(&c.TUNReader, "auto", "read", "io_uring")),
		svc.Var("MTU", "1440", "largest inner IP packet; set the TUN's MTU to it (underlay MTU minus 60 B: 28 B of UDP/IP and the tunnel's 32 B)", svc.Int(&c.MTU)),
		svc.Var("PATHS", "", `paths, JSON: [{"id":1,"local":"10.30.0.1:7001","remote":"10.20.0.1:7001","cwnd_bytes":50000,"rnis_ue":"10.30.0.1"}]; cwnd_bytes and rnis_ue optional`, svc.Str(&c.PathsJSON)),
		svc.Var("QUEUE", "fq_codel", "ingress queue discipline: fq_codel (RFC 8290) or fifo (tail drop, the comparison)", svc.OneOf(&c.Queue, "fq_codel", "fifo")),
		svc.Var("QUEUE_LIMIT_BYTES", "10000000", "ingress queue memory limit (research 003: 10 MB)", svc.Int(&c.QueueLimit)),
		svc.Var("CODEL_TARGET", "5ms", "CoDel target sojourn time", svc.Duration(&c.Target)),
		svc.Var("CODEL_INTERVAL", "100ms", "CoDel interval", svc.Duration(&c.Interval)),
		svc.Var("FQ_FLOWS", "1024", "FQ-CoDel flow queues", svc.Int(&c.Flows)),
		svc.Var("FQ_QUANTUM", "1400", "FQ-CoDel DRR quantum (bytes)", svc.Int(&c.Quantum)),
		svc.Var("SCHEDULER", "lowrtt", "path scheduler: rr, lowrtt or rnis (radio capacity and queue from the RNIS feed)", svc.OneOf(&c.Scheduler, sched.Names...)),
		svc.Var("CWND", "static", "per-path congestion window: static (= cwnd_bytes, the path's BDP, as research 003), adaptive (slow start, AIMD) or delay (steered once per RTT to keep the path's queueing delay, smallest RTT of the round minus the path's minimum, at CWND_TARGET)", svc.OneOf(&c.CwndMode, path.Modes...)),
		svc.Var("CWND_TARGET", "2ms", "the delay window's queueing delay target per path", svc.Duration(&c.CwndTarget)),
		svc.Var("CWND_BYTES", "50000", "default cwnd_bytes of a path (static window, adaptive start)", svc.Int(&c.CwndBytes)),
		svc.Var("REORDER_TIMEOUT", "20ms", "how long the egress waits for a missing packet before skipping it (0: no ordering, packets leave as they come)", svc.Duration(&c.ReorderTimeout)),
		svc.Var("SCHED_SLICE_US", "0", "EEVDF slice (µs, 100..100000) requested for every thread of the process (sched_setattr, Linux >= 6.12; threads started later inherit it): a shorter slice lets a waking thread preempt sooner; 0: the kernel's default (measured: 500 and 100 µs did not lower the bench's p99 at half load, 100 µs cost TCP throughput; docs/results.md, \"EEVDF slice\")", svc.Int(&c.SchedSliceUS)),
		svc.Var("PROBE_INTERVAL", "100ms", "an idle or down path is probed this often (RTT, liveness)", svc.Duration(&c.ProbeInterval)),
		svc.Var("AMQP_URL", "", "RabbitMQ URL of the RNIS feed (for the rnis scheduler) and of the backlog feed; empty: neither", svc.Str(&c.AMQPURL)),
		svc.Var("RNIS_EXCHANGE", "rnis", "topic exchange of the RNIS feed", svc.Str(&c.RnisExchange)),
		svc.Var("BACKLOG_EXCHANGE", "", "publish the backlog toward the peer (ingress queue, in flight, bytes read) on this topic exchange of AMQP_URL in the PEP's schema (pep.v1.backlog.<ue>), the path manager's queue input; empty: not published", svc.Str(&c.BacklogExchange)),
		svc.Var("BACKLOG_UE", "", "the UE address the backlog messages name (empty: the first path's rnis_ue)", svc.Str(&c.BacklogUE)),
		svc.Var("BACKLOG_INTERVAL", "2ms", "backlog sample period while something is held", svc.Duration(&c.BacklogInterval)),
	}...), c.PlatformSettings()...)
}

// Load reads the environment, then the flags in args.
func Load(fs *flag.FlagSet, args []string) (*Config, error) {
	c := &Config{}
	if err := svc.LoadSettings(Prefix, c.settings(), fs, args); err != nil {
		return nil, err
	}
	c.PublicURL = svc.PublicURL(c.PublicURL, c.HTTPHost, c.HTTPPort)
	return c, nil
}

// Markdown is the settings table for docs/configuration.md.
func Markdown() string {
	return svc.SettingsMarkdown(Prefix, (&Config{}).settings(), map[string]string{"STATE_DIR": svc.StateDirShown})
}

// Engine builds the data plane's configuration, refusing what cannot work.
func (c *Config) Engine() (engine.Config, error) {
	psk, err := c.psk()
	if err != nil {
		return engine.Config{}, err
	}
	paths, err := ParsePaths(c.PathsJSON)
	if err != nil {
		return engine.Config{}, err
	}
	if c.PeerID < 0 || c.PeerID > 0xffffffff {
		return engine.Config{}, fmt.Errorf("%sPEER_ID %d: not a uint32", Prefix, c.PeerID)
	}
	if c.MTU < 576 || c.MTU+wire.Overhead > 65000 {
		return engine.Config{}, fmt.Errorf("%sMTU %d: must be 576..%d", Prefix, c.MTU, 65000-wire.Overhead)
	}
	if c.CwndMode == path.CwndDelay && c.CwndTarget <= 0 {
		return engine.Config{}, fmt.Errorf("%sCWND_TARGET %v: must be positive", Prefix, c.CwndTarget)
	}
	if c.CwndBytes < c.MTU+wire.Overhead {
		return engine.Config{}, fmt.Errorf("%sCWND_BYTES %d: less than one datagram", Prefix, c.CwndBytes)
	}
	role := wire.RoleMEC
	if c.Role == "ue" {
		role = wire.RoleUE
	}
	q := aqm.Defaults()
	q.Discipline, q.LimitBytes, q.Target, q.Interval = c.Queue, c.QueueLimit, c.Target, c.Interval
	q.Flows, q.Quantum, q.MTU = c.Flows, c.Quantum, c.MTU
	if _, err := aqm.New(q, nil); err != nil {
		return engine.Config{}, err
	}
	return engine.Config{Role: role, PeerID: uint32(c.PeerID), PSK: psk, TUN: c.TUN, TUNRing: c.ringReader(), MTU: c.MTU, Paths: paths,
		Queue: q, Scheduler: c.Scheduler, CwndMode: c.CwndMode, CwndBytes: c.CwndBytes, CwndTarget: c.CwndTarget,
		ReorderTimeout: c.ReorderTimeout, ProbeInterval: c.ProbeInterval}, nil
}

// ringReader says whether the TUN is read through io_uring. auto picks it at the UE end only:
// there it lowered the p99 at half load at no more CPU, where at both ends it cost 14 % more
// CPU per Gbit/s and some TCP throughput (docs/results.md, "A batched TUN read").
func (c *Config) ringReader() bool {
	return c.TUNReader == "io_uring" || c.TUNReader == "auto" && c.Role == "ue"
}

func (c *Config) psk() ([]byte, error) {
	text := c.PSKHex
	if text == "" && c.PSKFile != "" {
		raw, err := os.ReadFile(c.PSKFile)
		if err != nil {
			return nil, fmt.Errorf("%sPSK_FILE: %w", Prefix, err)
		}
		text = string(raw)
	}
	if text == "" {
		return nil, errors.New(Prefix + "PSK or " + Prefix + "PSK_FILE is required: the tunnel never runs open")
	}
	psk, err := hex.DecodeString(strings.TrimSpace(text))
	if err != nil || len(psk) < 16 {
		return nil, errors.New(Prefix + "PSK: must be hex of at least 16 bytes")
	}
	return psk, nil
}

// ParsePaths reads the PATHS JSON: at least one path, ids 1..255 unique, addresses with ports.
func ParsePaths(raw string) ([]engine.PathConfig, error) {
	var paths []engine.PathConfig
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&paths); err != nil {
		return nil, fmt.Errorf("%sPATHS: %w", Prefix, err)
	}
	if len(paths) == 0 || len(paths) > 8 {
		return nil, fmt.Errorf("%sPATHS: 1 to 8 paths", Prefix)
	}
	seen := map[byte]bool{}
	for _, p := range paths {
		switch {
		case p.ID == 0 || seen[p.ID]:
			return nil, fmt.Errorf("%sPATHS: path id %d: ids are 1..255 and unique", Prefix, p.ID)
		case !p.Local.IsValid() || !p.Remote.IsValid() || p.Remote.Port() == 0:
			return nil, fmt.Errorf("%sPATHS: path %d needs local and remote ip:port", Prefix, p.ID)
		case p.CwndBytes < 0:
			return nil, fmt.Errorf("%sPATHS: path %d: negative cwnd_bytes", Prefix, p.ID)
		}
		seen[p.ID] = true
	}
	return paths, nil
}

// BacklogFeed is where the backlog is published: the UE it names; ok false when it is not.
func (c *Config) BacklogFeed(paths []engine.PathConfig) (ue netip.Addr, ok bool, err error) {
	if c.BacklogExchange == "" {
		return ue, false, nil
	}
	if c.AMQPURL == "" || c.BacklogInterval <= 0 {
		return ue, false, errors.New(Prefix + "BACKLOG_EXCHANGE needs " + Prefix + "AMQP_URL and a positive " + Prefix + "BACKLOG_INTERVAL")
	}
	if c.BacklogUE != "" {
		if ue, err = netip.ParseAddr(c.BacklogUE); err != nil || !ue.Is4() {
			return ue, false, fmt.Errorf("%sBACKLOG_UE %q: not an IPv4 address", Prefix, c.BacklogUE)
		}
		return ue, true, nil
	}
	if len(paths) == 0 || !paths[0].RnisUE.IsValid() {
		return ue, false, errors.New(Prefix + "BACKLOG_EXCHANGE needs " + Prefix + "BACKLOG_UE or an rnis_ue on the first path")
	}
	return paths[0].RnisUE, true, nil
}

// Public is the configuration as the API shows it (no key).
func (c *Config) Public() map[string]any {
	return map[string]any{"role": c.Role, "peerId": c.PeerID, "tun": c.TUN, "tunReader": c.TUNReader, "mtu": c.MTU,
		"queue": map[string]any{"discipline": c.Queue, "limitBytes": c.QueueLimit, "targetMs": ms(c.Target),
			"intervalMs": ms(c.Interval), "flows": c.Flows, "quantum": c.Quantum},
		"scheduler": c.Scheduler, "cwndMode": c.CwndMode, "cwndBytes": c.CwndBytes, "cwndTargetMs": ms(c.CwndTarget),
		"reorderTimeoutMs": ms(c.ReorderTimeout), "probeIntervalMs": ms(c.ProbeInterval), "schedSliceUs": c.SchedSliceUS,
		"rnisFeed": c.AMQPURL != "", "backlogFeed": c.BacklogExchange, "platform": c.PlatformURL != ""}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
