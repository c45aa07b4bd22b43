// Package config reads the adapter's settings: RNIS_* environment variables, overridden by
// command-line flags of the same name (RNIS_POLL_PERIOD = --poll-period).
package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is everything `rnis-adapter serve` needs.
type Config struct {
	LogLevel, LogFormat string
	HTTPHost            string
	HTTPPort            int
	APITokens           []string
	StateDir            string
	PublicURL           string
	TrustedProxies      []string

	AMQPURL, Exchange string
	MaxInFlight       int
	MaxLag            time.Duration
	Publish           string // ue, cell or both

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
	DebugAddr     string

	PlatformURL, AppInstanceID, ClientID, ClientSecret string
}

type setting struct {
	name, def, help string
	set             func(string) error
}

// settings lists every setting with its environment variable, default and meaning
// (docs/configuration.md is generated from the same list by `rnis-adapter env`).
func (c *Config) settings() []setting {
	return []setting{
		{"LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR", str(&c.LogLevel)},
		{"LOG_FORMAT", "console", "json for machines, console for people", str(&c.LogFormat)},
		{"HTTP_HOST", "0.0.0.0", "address the MEC 012 API listens on", str(&c.HTTPHost)},
		{"HTTP_PORT", "8101", "port of the MEC 012 API", integer(&c.HTTPPort)},
		{"API_TOKENS", "", "static bearer tokens (comma-separated); none and no platform: one is generated into STATE_DIR/rnis-adapter.token", list(&c.APITokens)},
		{"STATE_DIR", defaultStateDir(), "directory for the generated token and the MEC 012 subscriptions (rnis-subscriptions.json)", str(&c.StateDir)},
		{"PUBLIC_URL", "", "base URL clients reach the API at (links, Mp1 registration); default http://<host>:<port>", str(&c.PublicURL)},
		{"TRUSTED_PROXIES", "", "CIDRs of reverse proxies whose X-Forwarded-Proto/Host/Prefix are honoured (comma-separated; empty = nobody's)", list(&c.TrustedProxies)},
		{"AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F", "RabbitMQ URL (AMQP 0-9-1)", str(&c.AMQPURL)},
		{"AMQP_EXCHANGE", "rnis", "topic exchange of the feed (durable)", str(&c.Exchange)},
		{"AMQP_PUBLISH", "ue", "measurement messages: ue (one per UE per poll, rnis.v1.meas.*), cell (one per cell per poll with every UE, rnis.v1.cell.*; for 1 ms polling) or both", oneOf(&c.Publish, "ue", "cell", "both")},
		{"AMQP_MAX_IN_FLIGHT", "4096", "unconfirmed messages before new ones are dropped (bounds the delay when the broker is slow)", integer(&c.MaxInFlight)},
		{"AMQP_MAX_LAG", "200ms", "when the oldest unconfirmed message is older, new ones are dropped (they would arrive stale)", duration(&c.MaxLag)},
		{"FLEXRAN_URL", "http://127.0.0.1:9999", "FlexRAN controller (or RAN emulator) northbound base URL", str(&c.FlexRANURL)},
		{"FLEXRAN_TOKEN", "", "bearer token sent to the RAN source: the RAN emulator's (testbed up gives it TESTBED_EMULATOR_TOKEN when set); a FlexRAN controller needs none", str(&c.FlexRANToken)},
		{"FLEXRAN_PATH", "/stats", "statistics path: /stats, or /stats_manager/json/all for 2017 builds", str(&c.FlexRANPath)},
		{"FLEXRAN_TOKEN_FILE", "", "file holding that token, read at start when FLEXRAN_TOKEN is unset (e.g. the emulator's <state dir>/ran-emulator.token)", str(&c.FlexRANTokenFile)},
		{"FLEXRAN_SPLIT", "true", "poll <path>/mac_stats every period and <path>/enb_config slowly (false: the whole document every poll)", boolean(&c.Split)},
		{"POLL_PERIOD", "8ms", "poll period, 1ms..10s", duration(&c.PollPeriod)},
		{"POLL_TIMEOUT", "1s", "timeout of one statistics request", duration(&c.PollTimeout)},
		{"CONFIG_PERIOD", "1s", "enb_config refresh period in split mode (also on an unknown RNTI)", duration(&c.ConfigPeriod)},
		{"REPORT_SF", "0", "if > 0, keep the controller's reporting period at this many ms: set on every (re)connection of an eNB (POST /stats/conf/enb/:id), read back every CONFIG_PERIOD and set again when the controller's configuration or the report stream differs", integer(&c.ReportSF)},
		{"SFN_FORMAT", "decimal", "how the source writes sfnSn: decimal (frame*10+subframe: OAI's FlexRAN agent, the RAN emulator) or packed (frame<<4|subframe)", oneOf(&c.SFNFormat, "decimal", "packed")},
		{"STALE_BOUND", "50ms", "the consumers' staleness bound (the PEP's PEP_MELD_STALE_MS): a warning is logged when the RAN reports less often", duration(&c.StaleBound)},
		{"IP_MAP", "", "JSON file mapping IMSI or <bs_id>/<rnti> to UE IPv4 (docs/rnis-adapter.md)", str(&c.IPMapFile)},
		{"DETACH_AFTER", "1s", "a UE missing from the statistics this long (and 2 polls) is detached", duration(&c.DetachAfter)},
		{"NOTIFY_TIMEOUT", "2s", "timeout of one MEC 012 notification POST", duration(&c.NotifyTimeout)},
		{"DEBUG_ADDR", "", "if set (e.g. 127.0.0.1:6060), serve Go's pprof profiles there, without auth: for profiling only", str(&c.DebugAddr)},
		{"PLATFORM_URL", "", "MEC platform base URL (Mp1); unset = standalone", str(&c.PlatformURL)},
		{"APP_INSTANCE_ID", "", "this app's instance id on the platform", str(&c.AppInstanceID)},
		{"CLIENT_ID", "", "OAuth2 client id issued by the platform", str(&c.ClientID)},
		{"CLIENT_SECRET", "", "OAuth2 client secret", str(&c.ClientSecret)},
	}
}

// Prefix of the environment variables.
const Prefix = "RNIS_"

// Load reads the environment, then the flags in args.
func Load(fs *flag.FlagSet, args []string) (*Config, error) {
	c := &Config{}
	settings := c.settings()
	values := map[string]*string{}
	for _, s := range settings {
		def := s.def
		if v, ok := os.LookupEnv(Prefix + s.name); ok {
			def = v
		}
		values[s.name] = fs.String(flagName(s.name), def, s.help+" ($"+Prefix+s.name+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, s := range settings {
		if err := s.set(*values[s.name]); err != nil {
			return nil, fmt.Errorf("%s%s: %w", Prefix, s.name, err)
		}
	}
	if c.PublicURL == "" {
		host := c.HTTPHost
		if host == "0.0.0.0" || host == "" || host == "::" {
			host = "127.0.0.1"
		}
		c.PublicURL = fmt.Sprintf("http://%s:%d", host, c.HTTPPort)
	}
	c.PublicURL = strings.TrimSuffix(c.PublicURL, "/")
	if c.FlexRANToken == "" && c.FlexRANTokenFile != "" {
		raw, err := os.ReadFile(c.FlexRANTokenFile)
		if err != nil {
			return nil, fmt.Errorf("%sFLEXRAN_TOKEN_FILE: %w", Prefix, err)
		}
		c.FlexRANToken = strings.TrimSpace(string(raw))
	}
	return c, nil
}

// Markdown is the settings table for docs/configuration.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range (&Config{}).settings() {
		def := s.def
		if s.name == "STATE_DIR" {
			def = "/var/lib/mts (root), else ~/.local/state/mts"
		}
		fmt.Fprintf(&b, "| `%s%s` | `--%s` | `%s` | %s |\n", Prefix, s.name, flagName(s.name), def, s.help)
	}
	return b.String()
}

func flagName(env string) string { return strings.ReplaceAll(strings.ToLower(env), "_", "-") }

func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/mts"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mts")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "mts")
}

func str(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

func integer(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*p = n
		return nil
	}
}

func boolean(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*p = b
		return nil
	}
}

func duration(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 8ms, 1s)", v)
		}
		*p = d
		return nil
	}
}

func oneOf(p *string, allowed ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
		}
		*p = v
		return nil
	}
}

func list(p *[]string) func(string) error {
	return func(v string) error {
		*p = nil
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				*p = append(*p, item)
			}
		}
		return nil
	}
}
