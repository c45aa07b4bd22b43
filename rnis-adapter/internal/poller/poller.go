// Package poller polls the FlexRAN northbound statistics and hands each snapshot on.
//
// In split mode (the default) it polls <path>/mac_stats every period and <path>/enb_config
// (IMSI, cell bandwidth, logical channels) slowly, and at once when an unknown RNTI shows up:
// the configuration is most of a document's bytes and rarely changes. Old controllers
// (/stats_manager/json/all) have no split; there every poll reads the whole document.
package poller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/ranclock"
)

// Config of a Poller.
type Config struct {
	BaseURL      string        // http://127.0.0.1:9999
	Path         string        // /stats
	Token        string        // bearer token of the source, if it wants one
	Split        bool          // poll mac_stats fast and enb_config slowly
	Period       time.Duration // 1 ms .. 10 s
	Timeout      time.Duration // per request
	ConfigPeriod time.Duration // enb_config refresh in split mode
	ReportSF     int           // >0: keep the controller's reporting period at this many ms
	MaxBackoff   time.Duration
	Clock        *ranclock.Clock // the report stream's clock: the period the agent really keeps
	StaleBound   time.Duration   // consumers' staleness bound (MELD's): warn when reports are rarer
}

// Validate checks the ranges the adapter supports.
func (c *Config) Validate() error {
	switch {
	case c.Period < time.Millisecond || c.Period > 10*time.Second:
		return fmt.Errorf("poll period %v outside 1ms..10s", c.Period)
	case c.Timeout <= 0:
		return errors.New("poll timeout must be positive")
	case !strings.HasPrefix(c.BaseURL, "http://") && !strings.HasPrefix(c.BaseURL, "https://"):
		return fmt.Errorf("FlexRAN URL %q: want http:// or https://", c.BaseURL)
	case !strings.HasPrefix(c.Path, "/"):
		return fmt.Errorf("FlexRAN path %q must start with /", c.Path)
	}
	return nil
}

// Observer receives what the poller sees.
type Observer interface {
	SourceUp(up bool, detail string)
	Polled(latency time.Duration, bytes int)
	PollFailed(reason string)
	Skipped(reason string)
	ReportPeriodSet(bsID int64)
	ReportPeriod(bsID int64, period, tti time.Duration)
}

// Handler processes one snapshot; observed is when the response arrived.
type Handler func(s *flexran.Snapshot, observed time.Time)

// Poller polls one controller.
type Poller struct {
	cfg     Config
	obs     Observer
	log     *slog.Logger
	client  *http.Client
	parser  flexran.Parser
	body    bytes.Buffer
	configs map[int64]flexran.Station // split mode: the last enb_config per bs_id
	lastCfg time.Time
	confSet map[int64]bool // stations whose reporting period was set since they (re)appeared
	present map[int64]bool // stations of the last poll
	slow    map[int64]bool // stations reporting less often than StaleBound (warned)
	// split mode: when each not-yet-configured UE was first seen
	unknownSince map[[2]int64]time.Time
}

// New returns a poller with a keep-alive HTTP client.
func New(cfg Config, obs Observer, log *slog.Logger) *Poller {
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // loopback/LAN: gzip costs more CPU than it saves
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	return &Poller{cfg: cfg, obs: obs, log: log, configs: map[int64]flexran.Station{}, confSet: map[int64]bool{}, present: map[int64]bool{}, slow: map[int64]bool{}, unknownSince: map[[2]int64]time.Time{},
		client: &http.Client{Transport: transport, Timeout: cfg.Timeout}}
}

// Run polls until ctx ends. A failing source is retried with capped exponential backoff.
func (p *Poller) Run(ctx context.Context, handle Handler) {
	ticker := time.NewTicker(p.cfg.Period)
	defer ticker.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := p.pollOnce(ctx, handle); err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, p.cfg.Period, 50*time.Millisecond), p.cfg.MaxBackoff)
			clear(p.confSet) // a controller that restarted forgot the reporting period
			p.obs.SourceUp(false, err.Error())
			p.log.Warn("RAN source poll failed", "err", err, "retry_in", backoff.String())
			if !sleep(ctx, backoff) {
				return
			}
			continue
		}
		if backoff > 0 {
			p.log.Info("RAN source back")
		}
		backoff = 0
	}
}

func (p *Poller) pollOnce(ctx context.Context, handle Handler) error {
	path := p.cfg.Path
	verify := time.Since(p.lastCfg) >= p.cfg.ConfigPeriod
	if p.cfg.Split {
		path = strings.TrimSuffix(path, "/") + "/mac_stats"
		if verify {
			if err := p.refreshConfig(ctx); err != nil {
				return err
			}
		}
	} else if verify {
		p.lastCfg = time.Now()
	}
	snaps, observed, err := p.fetch(ctx, path)
	if err != nil {
		return err
	}
	if p.cfg.Split && p.unknownUE(snaps) && time.Since(p.lastCfg) >= 10*time.Millisecond {
		if err := p.refreshConfig(ctx); err != nil {
			return err
		}
	}
	if p.cfg.Split {
		p.mergeAll(snaps)
	}
	if !hasCell(snaps) {
		// the controller answers but no eNB is connected (e.g. after a controller restart)
		p.obs.SourceUp(false, "no cell reported by "+p.cfg.BaseURL+path+": no eNB connected to the controller")
	} else {
		p.obs.SourceUp(true, "polling "+p.cfg.BaseURL+path)
	}
	for i := range snaps {
		s := &snaps[i]
		for _, skip := range s.Skipped {
			p.obs.Skipped("bad_ue")
			p.log.Debug("UE entry skipped", "bs_id", skip.BSID, "index", skip.Index, "reason", skip.Reason)
		}
		if p.cfg.Split {
			p.holdUnknown(s)
		}
		handle(s, observed)
	}
	var shortest map[int64]ranclock.Shortest
	if verify && p.cfg.Clock != nil {
		shortest = p.cfg.Clock.TakeShortest()
	}
	if len(snaps) > 0 {
		p.keepReportPeriod(ctx, &snaps[len(snaps)-1], verify, shortest)
	}
	if verify {
		p.checkReportPeriods(shortest)
	}
	return nil
}

// checkReportPeriods exports each station's measured report period and TTI, and warns when
// reports come less often than the consumers' staleness bound: they would then act on
// stale radio state (MELD falls back to plain TCP) part of the time. It judges the shortest
// interval since the last check (the last one when there was none): one late poll or one
// gap in the RF simulator's pace is no reason to lower RNIS_REPORT_SF (the live run of
// issues 22/23 warned and took it back every few seconds on the last interval alone).
func (p *Poller) checkReportPeriods(shortest map[int64]ranclock.Shortest) {
	if p.cfg.Clock == nil {
		return
	}
	for id, r := range p.cfg.Clock.Stations() {
		p.obs.ReportPeriod(id, r.ReportPeriod, r.TTI)
		period := r.ReportPeriod
		if s := shortest[id].Period; s > 0 {
			period = s
		}
		slow := p.cfg.StaleBound > 0 && period > p.cfg.StaleBound
		if slow == p.slow[id] {
			continue // said when it started or ended
		}
		p.slow[id] = slow
		if slow {
			p.log.Warn("RAN reports are rarer than the consumers' staleness bound: set RNIS_REPORT_SF lower",
				"bs_id", id, "report_period", r.ReportPeriod.String(), "report_subframes", r.ReportSF,
				"stale_bound", p.cfg.StaleBound.String(), "tti", r.TTI.String())
		} else {
			p.log.Info("RAN reports within the consumers' staleness bound again", "bs_id", id,
				"report_period", r.ReportPeriod.String())
		}
	}
}

func (p *Poller) fetch(ctx context.Context, path string) ([]flexran.Snapshot, time.Time, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.BaseURL+path, nil)
	if err != nil {
		return nil, start, err
	}
	p.authorize(req)
	resp, err := p.client.Do(req)
	if err != nil {
		p.obs.PollFailed("unreachable")
		return nil, start, err
	}
	defer resp.Body.Close()
	p.body.Reset()
	_, err = p.body.ReadFrom(io.LimitReader(resp.Body, 64<<20))
	observed := time.Now()
	if err != nil {
		p.obs.PollFailed("read")
		return nil, observed, err
	}
	if resp.StatusCode != http.StatusOK {
		p.obs.PollFailed("http_status")
		return nil, observed, fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, p.body.Bytes())
	}
	p.obs.Polled(observed.Sub(start), p.body.Len())
	snaps, err := p.parser.Parse(p.body.Bytes())
	if err != nil {
		p.obs.PollFailed("parse")
		return nil, observed, fmt.Errorf("GET %s: %w", path, err)
	}
	return snaps, observed, nil
}

func (p *Poller) refreshConfig(ctx context.Context) error {
	snaps, _, err := p.fetch(ctx, strings.TrimSuffix(p.cfg.Path, "/")+"/enb_config")
	if err != nil {
		return err
	}
	p.lastCfg = time.Now()
	configs := map[int64]flexran.Station{}
	for _, st := range snaps[len(snaps)-1].Stations {
		configs[st.BSID] = st
	}
	p.configs = configs
	return nil
}

func (p *Poller) unknownUE(snaps []flexran.Snapshot) bool {
	for _, s := range snaps {
		for _, st := range s.Stations {
			conf, ok := p.configs[st.BSID]
			if !ok {
				return true
			}
			for _, ue := range st.UEs {
				if !hasRNTI(conf.UEConfig, ue.RNTI) {
					return true
				}
			}
		}
	}
	return false
}

func hasRNTI(list []flexran.UEConfig, rnti int64) bool {
	for _, c := range list {
		if c.RNTI == rnti {
			return true
		}
	}
	return false
}

// holdUnknown leaves out, for up to ConfigPeriod, a UE whose configuration (IMSI) the
// controller does not list yet: a UE that just attached or moved is reported once it can be
// identified, so that a handover is not mistaken for a new UE.
func (p *Poller) holdUnknown(s *flexran.Snapshot) {
	now := time.Now()
	for i := range s.Stations {
		st := &s.Stations[i]
		kept := st.UEs[:0]
		for _, ue := range st.UEs {
			key := [2]int64{st.BSID, ue.RNTI}
			if hasRNTI(st.UEConfig, ue.RNTI) {
				delete(p.unknownSince, key)
				kept = append(kept, ue)
				continue
			}
			first, ok := p.unknownSince[key]
			if !ok {
				p.unknownSince[key], first = now, now
			}
			if now.Sub(first) >= p.cfg.ConfigPeriod {
				kept = append(kept, ue) // never configured: report it without an IMSI
			}
		}
		st.UEs = kept
	}
	if len(p.unknownSince) > 4096 { // forget RNTIs that went away unconfigured
		clear(p.unknownSince)
	}
}

func (p *Poller) mergeAll(snaps []flexran.Snapshot) {
	for i := range snaps {
		p.mergeConfig(&snaps[i])
	}
}

// hasCell tells whether the last sample reports any cell.
func hasCell(snaps []flexran.Snapshot) bool {
	if len(snaps) == 0 {
		return false
	}
	for _, st := range snaps[len(snaps)-1].Stations {
		if len(st.Cells) > 0 {
			return true
		}
	}
	return false
}

func (p *Poller) mergeConfig(s *flexran.Snapshot) {
	for i := range s.Stations {
		st := &s.Stations[i]
		if conf, ok := p.configs[st.BSID]; ok {
			st.Cells, st.UEConfig, st.LCConfig = conf.Cells, conf.UEConfig, conf.LCConfig
		}
	}
}

// keepReportPeriod sets the controller's reporting period of every station that is new or
// came back (a restarted eNB or controller reuses its bs_id and falls back to the
// controller's default, 100 ms), and, when verify is set, reads each station's
// configuration back and sets it again if it differs.
func (p *Poller) keepReportPeriod(ctx context.Context, s *flexran.Snapshot, verify bool, shortest map[int64]ranclock.Shortest) {
	if p.cfg.ReportSF <= 0 {
		return
	}
	now := map[int64]bool{}
	for _, st := range s.Stations {
		now[st.BSID] = true
		if !p.present[st.BSID] {
			delete(p.confSet, st.BSID) // (re)appeared: its reporting configuration is unknown
		}
	}
	p.present = now
	for id := range now {
		switch {
		case !p.confSet[id]:
			p.setReportPeriod(ctx, id, "station (re)connected")
		case verify:
			if sf, freq, err := p.getReportConf(ctx, id); err != nil {
				p.log.Warn("could not read the controller's reporting period", "bs_id", id, "err", err)
			} else if freq != "FLSRF_PERIODICAL" || sf != p.cfg.ReportSF {
				p.setReportPeriod(ctx, id, fmt.Sprintf("controller reports %s every %d ms", freq, sf))
			} else if got, limit := shortest[id].SF, p.expectedPeriodSF(id); got > limit {
				// the controller's configuration reads right but the agent reports slower
				p.setReportPeriod(ctx, id, fmt.Sprintf("reports arrive every %d subframes at best", got))
			}
		}
	}
}

func (p *Poller) setReportPeriod(ctx context.Context, bsID int64, why string) {
	p.confSet[bsID] = true
	if err := p.postReportConf(ctx, bsID); err != nil {
		p.log.Warn("could not set the controller's reporting period", "bs_id", bsID, "err", err)
		return
	}
	p.obs.ReportPeriodSet(bsID)
	p.log.Info("controller reporting period set", "bs_id", bsID, "sf_ms", p.cfg.ReportSF, "why", why)
}

// expectedPeriodSF is the longest report interval, in subframes, that the configured
// period explains. The adapter sees a new report at most once per poll, so a RAN that
// reports more often than it polls shows the poll period: RNIS_POLL_PERIOD in the
// station's measured TTIs (the RF simulator runs ~1.6 subframes per ms idle).
func (p *Poller) expectedPeriodSF(bsID int64) int64 {
	expected := int64(p.cfg.ReportSF)
	if p.cfg.Clock != nil {
		if tti := p.cfg.Clock.Stations()[bsID].TTI; tti > 0 {
			expected = max(expected, int64((p.cfg.Period+tti-1)/tti))
		}
	}
	return expected*3/2 + 2
}

// getReportConf reads GET /stats/conf/enb/:id: the period (ms) and frequency in force.
func (p *Poller) getReportConf(ctx context.Context, bsID int64) (sf int, freq string, err error) {
	url := fmt.Sprintf("%s/stats/conf/enb/%d", p.cfg.BaseURL, bsID)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	p.authorize(req)
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return 0, "", fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, body)
	}
	var conf struct {
		Reports []struct {
			ReportFrequency string `json:"reportFrequency"`
			SF              int    `json:"sf"`
		} `json:"reports"`
	}
	if err := json.Unmarshal(body, &conf); err != nil || len(conf.Reports) == 0 {
		return 0, "", fmt.Errorf("not a reporting configuration: %.200s", body)
	}
	return conf.Reports[0].SF, conf.Reports[0].ReportFrequency, nil
}

// ReportConf is the body of POST /stats/conf/enb/:id (flexran-rtc v2 apidoc example).
func ReportConf(sf int) string {
	return fmt.Sprintf(`{"reports":[{"reportFrequency":"FLSRF_PERIODICAL","sf":%d,`+
		`"cellReports":["FLCST_NOISE_INTERFERENCE"],"ueReports":["FLUST_PHR","FLUST_DL_CQI","FLUST_BSR",`+
		`"FLUST_RLC_BS","FLUST_MAC_CE_BS","FLUST_UL_CQI","FLUST_RRC_MEASUREMENTS","FLUST_PDCP_STATS",`+
		`"FLUST_MAC_STATS","FLUST_GTP_STATS"]}]}`, sf)
}

// authorize adds the source's bearer token, if one is configured.
func (p *Poller) authorize(req *http.Request) {
	if p.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	}
}

func (p *Poller) postReportConf(ctx context.Context, bsID int64) error {
	url := fmt.Sprintf("%s/stats/conf/enb/%d", p.cfg.BaseURL, bsID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(ReportConf(p.cfg.ReportSF)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	p.authorize(req)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, msg)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
