package svc

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

// Setting is one environment variable (<prefix><Name>) and its command-line flag of the
// same name (RNIS_POLL_PERIOD = --poll-period).
type Setting struct {
	Name, Def, Help string
	Set             func(string) error
}

// LoadSettings reads the environment, then the flags in args, into settings.
func LoadSettings(prefix string, settings []Setting, fs *flag.FlagSet, args []string) error {
	values := map[string]*string{}
	for _, s := range settings {
		def := s.Def
		if v, ok := os.LookupEnv(prefix + s.Name); ok {
			def = v
		}
		values[s.Name] = fs.String(flagName(s.Name), def, s.Help+" ($"+prefix+s.Name+")")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range settings {
		if err := s.Set(*values[s.Name]); err != nil {
			return fmt.Errorf("%s%s: %w", prefix, s.Name, err)
		}
	}
	return nil
}

// SettingsMarkdown is the settings table for docs/configuration.md; shown replaces the
// default shown for some names (e.g. one that depends on the machine).
func SettingsMarkdown(prefix string, settings []Setting, shown map[string]string) string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range settings {
		def := s.Def
		if d, ok := shown[s.Name]; ok {
			def = d
		}
		fmt.Fprintf(&b, "| `%s%s` | `--%s` | `%s` | %s |\n", prefix, s.Name, flagName(s.Name), def, s.Help)
	}
	return b.String()
}

// StateDirShown is how the default of DefaultStateDir reads in the docs.
const StateDirShown = "/var/lib/mts (root), else ~/.local/state/mts"

func flagName(env string) string { return strings.ReplaceAll(strings.ToLower(env), "_", "-") }

// DefaultStateDir is /var/lib/mts for root, else the user's state directory.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/mts"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "mts")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "mts")
}

// PublicURL is the base URL clients reach a service at: the configured one, else
// http://<host>:<port> (loopback for a wildcard host).
func PublicURL(configured, host string, port int) string {
	if configured == "" {
		if host == "0.0.0.0" || host == "" || host == "::" {
			host = "127.0.0.1"
		}
		configured = fmt.Sprintf("http://%s:%d", host, port)
	}
	return strings.TrimSuffix(configured, "/")
}

// Str sets a string.
func Str(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

// Int sets an integer.
func Int(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*p = n
		return nil
	}
}

// Bool sets a boolean.
func Bool(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		*p = b
		return nil
	}
}

// Duration sets a duration.
func Duration(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 8ms, 1s)", v)
		}
		*p = d
		return nil
	}
}

// OneOf sets a string that must be one of allowed.
func OneOf(p *string, allowed ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(allowed, ", "))
		}
		*p = v
		return nil
	}
}

// List sets a comma-separated list.
func List(p *[]string) func(string) error {
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

// Var is a Setting.
func Var(name, def, help string, set func(string) error) Setting {
	return Setting{Name: name, Def: def, Help: help, Set: set}
}

// Common holds the settings every Go service has (docs/development.md "Configuration").
type Common struct {
	LogLevel, LogFormat string
	HTTPHost            string
	HTTPPort            int
	APITokens           []string
	StateDir            string
	PublicURL           string
	TrustedProxies      []string

	PlatformURL, AppInstanceID, ClientID, ClientSecret string
}

// APISettings are the logging, API and state settings of service, whose API (described
// as api) listens on port; stateHolds says what else STATE_DIR keeps.
func (c *Common) APISettings(service, api, port, stateHolds string) []Setting {
	return []Setting{
		Var("LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR", Str(&c.LogLevel)),
		Var("LOG_FORMAT", "console", "json for machines, console for people", Str(&c.LogFormat)),
		Var("HTTP_HOST", "0.0.0.0", "address the "+api+" listens on", Str(&c.HTTPHost)),
		Var("HTTP_PORT", port, "port of the "+api, Int(&c.HTTPPort)),
		Var("API_TOKENS", "", "static bearer tokens (comma-separated); none and no platform: one is generated into STATE_DIR/"+service+".token", List(&c.APITokens)),
		Var("STATE_DIR", DefaultStateDir(), "directory for the generated token"+stateHolds, Str(&c.StateDir)),
		Var("PUBLIC_URL", "", "base URL clients reach the API at (links, Mp1 registration); default http://<host>:<port>", Str(&c.PublicURL)),
		Var("TRUSTED_PROXIES", "", "CIDRs of reverse proxies whose X-Forwarded-Proto/Host/Prefix are honoured (comma-separated; empty = nobody's)", List(&c.TrustedProxies)),
	}
}

// PlatformSettings are the Mp1 settings (MEC platform and this app's credentials).
func (c *Common) PlatformSettings() []Setting {
	return []Setting{
		Var("PLATFORM_URL", "", "MEC platform base URL (Mp1); unset = standalone", Str(&c.PlatformURL)),
		Var("APP_INSTANCE_ID", "", "this app's instance id on the platform", Str(&c.AppInstanceID)),
		Var("CLIENT_ID", "", "OAuth2 client id issued by the platform", Str(&c.ClientID)),
		Var("CLIENT_SECRET", "", "OAuth2 client secret", Str(&c.ClientSecret)),
	}
}
