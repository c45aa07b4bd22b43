// Package config reads the adapter's settings: RNIS_* environment variables, overridden by
// command-line flags of the same name (RNIS_POLL_PERIOD = --poll-period).
package config

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"mts.invalid/suite/services/common/go/svc"
)

// Config is everything `rnis-adapter serve` needs.
type Config struct {
	svc.Common

	AMQPURL, Exchange string
	MaxInFlight       int
	MaxLag            time.Duration
	Publish           string // ue, cell or both

	Source                  string // flexran or e2
	E2Addr, E2Token         string
	E2TokenFile             string
	FlexRANURL, FlexRANPath string
	FlexRANToken            string
	FlexRANTokenFile        string
	Split                   bool
	PollPeriod, PollTimeout time.Duration
	ConfigPeriod            time.Duration
	ReportSF                int
	SFNFormat               string
	StaleBound              time.Duration
	IPMapFile               string
	DetachAfter             time.Duration

	NotifyTimeout time.Duration
	MaxSubsPerApp int
	DebugAddr     string
}

// settings lists every setting with its environment variable, default and meaning
// (docs/configuration.md is generated from the same list by `rnis-adapter env`).
func (c *Config) settings() []svc.Setting {
	api := c.APISettings("rnis-adapter", "MEC 012 API", "8101", " and the MEC 012 subscriptions (rnis-subscriptions.json)")
	return append(append(api, []svc.Setting{
		svc.Var("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F", "RabbitMQ URL (AMQP 0-9-1)", svc.Str(&c.AMQPURL)),
		svc.Var("AMQP_EXCHANGE", "rnis", "topic exchange of the feed (durable)", svc.Str(&c.Exchange)),
		svc.Var("AMQP_PUBLISH", "ue", "measurement messages: ue (one per UE per poll, rnis.v1.meas.*), cell (one per cell per poll with every UE, rnis.v1.cell.*; for 1 ms polling) or both", svc.OneOf(&c.Publish, "ue", "cell", "both")),
		svc.Var("AMQP_MAX_IN_FLIGHT", "4096", "unconfirmed messages before new ones are dropped (bounds the delay when the broker is slow)", svc.Int(&c.MaxInFlight)),
		svc.Var("AMQP_MAX_LAG", "200ms", "when the oldest unconfirmed message is older, new ones are dropped (they would arrive stale)", svc.Duration(&c.MaxLag)),
		svc.Var("SOURCE", "flexran", "RAN source: flexran (poll a FlexRAN controller or the RAN emulator) or e2 (read the mts-e2 stream of our FlexRIC xApp or the RAN emulator, docs/e2.md)", svc.OneOf(&c.Source, "flexran", "e2")),
		svc.Var("E2_ADDR", "127.0.0.1:36430", "with SOURCE=e2: host:port of the mts-e2 stream (testbed/e2-xapp, or the RAN emulator's EMU_E2_PORT)", svc.Str(&c.E2Addr)),
		svc.Var("E2_TOKEN", "", "with SOURCE=e2: token the stream requires (the xApp's --token-file, the emulator's API token)", svc.Str(&c.E2Token)),
		svc.Var("E2_TOKEN_FILE", "", "file holding that token, read at start when E2_TOKEN is unset", svc.Str(&c.E2TokenFile)),
		svc.Var("FLEXRAN_URL", "http://127.0.0.1:9999", "FlexRAN controller (or RAN emulator) northbound base URL", svc.Str(&c.FlexRANURL)),
		svc.Var("FLEXRAN_TOKEN", "", "bearer token sent to the RAN source: the RAN emulator's (testbed up gives it TESTBED_EMULATOR_TOKEN when set); a FlexRAN controller needs none", svc.Str(&c.FlexRANToken)),
		svc.Var("FLEXRAN_PATH", "/stats", "statistics path: /stats, or /stats_manager/json/all for 2017 builds", svc.Str(&c.FlexRANPath)),
		svc.Var("FLEXRAN_TOKEN_FILE", "", "file holding that token, read at start when FLEXRAN_TOKEN is unset (e.g. the emulator's <state dir>/ran-emulator.token)", svc.Str(&c.FlexRANTokenFile)),
		svc.Var("FLEXRAN_SPLIT", "true", "poll <path>/mac_stats every period and <path>/enb_config slowly (false: the whole document every poll)", svc.Bool(&c.Split)),
		svc.Var("POLL_PERIOD", "8ms", "poll period, 1ms..10s", svc.Duration(&c.PollPeriod)),
		svc.Var("POLL_TIMEOUT", "1s", "timeout of one statistics request", svc.Duration(&c.PollTimeout)),
		svc.Var("CONFIG_PERIOD", "1s", "enb_config refresh period in split mode (also on an unknown RNTI)", svc.Duration(&c.ConfigPeriod)),
		svc.Var("REPORT_SF", "0", "if > 0, keep the controller's reporting period at this many ms: set on every (re)connection of an eNB (POST /stats/conf/enb/:id), read back every CONFIG_PERIOD and set again when the controller's configuration differs or the report stream shows reports further apart than the period or the poll explain", svc.Int(&c.ReportSF)),
		svc.Var("SFN_FORMAT", "decimal", "how the source writes sfnSn: decimal (frame*10+subframe: OAI's FlexRAN agent, the RAN emulator) or packed (frame<<4|subframe)", svc.OneOf(&c.SFNFormat, "decimal", "packed")),
		svc.Var("STALE_BOUND", "50ms", "the consumers' staleness bound (the PEP's PEP_MELD_STALE_MS): a warning is logged when the RAN reports less often", svc.Duration(&c.StaleBound)),
		svc.Var("IP_MAP", "", "JSON file mapping IMSI or <bs_id>/<rnti> to UE IPv4 (docs/rnis-adapter.md)", svc.Str(&c.IPMapFile)),
		svc.Var("DETACH_AFTER", "1s", "a UE missing from the statistics this long (and 2 polls) is detached", svc.Duration(&c.DetachAfter)),
		svc.Var("NOTIFY_TIMEOUT", "2s", "timeout of one MEC 012 notification POST", svc.Duration(&c.NotifyTimeout)),
		svc.Var("MAX_SUBSCRIPTIONS_PER_APP", "100", "MEC 012 subscriptions one app instance (or the static tokens together) may hold; beyond: 403", svc.Int(&c.MaxSubsPerApp)),
		svc.Var("DEBUG_ADDR", "", "if set (e.g. 127.0.0.1:6060), serve Go's pprof profiles there, without auth: for profiling only", svc.Str(&c.DebugAddr)),
	}...), c.PlatformSettings()...)
}

// Prefix of the environment variables.
const Prefix = "RNIS_"

// Load reads the environment, then the flags in args.
func Load(fs *flag.FlagSet, args []string) (*Config, error) {
	c := &Config{}
	if err := svc.LoadSettings(Prefix, c.settings(), fs, args); err != nil {
		return nil, err
	}
	c.PublicURL = svc.PublicURL(c.PublicURL, c.HTTPHost, c.HTTPPort)
	if c.FlexRANToken == "" && c.FlexRANTokenFile != "" {
		raw, err := os.ReadFile(c.FlexRANTokenFile)
		if err != nil {
			return nil, fmt.Errorf("%sFLEXRAN_TOKEN_FILE: %w", Prefix, err)
		}
		c.FlexRANToken = strings.TrimSpace(string(raw))
	}
	if c.E2Token == "" && c.E2TokenFile != "" {
		raw, err := os.ReadFile(c.E2TokenFile)
		if err != nil {
			return nil, fmt.Errorf("%sE2_TOKEN_FILE: %w", Prefix, err)
		}
		c.E2Token = strings.TrimSpace(string(raw))
	}
	return c, nil
}

// Markdown is the settings table for docs/configuration.md.
func Markdown() string {
	return svc.SettingsMarkdown(Prefix, (&Config{}).settings(), map[string]string{"STATE_DIR": svc.StateDirShown})
}
