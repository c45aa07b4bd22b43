package api

import (
	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

// The eNB_config entry of one cell. Struct field order is the key order of the live
// OAI + flexran-rtc capture; the values are the emulator's configuration. OAI fields the
// emulator does not model keep the values that capture shows for an OAI eNB in RF
// simulator mode (e.g. s1ap "not connected" = 4294967295, no S1 in the testbed).

type header struct {
	Version int `json:"version"`
	Type    int `json:"type"`
	Xid     int `json:"xid"`
}

type agentInfo struct {
	AgentID      int      `json:"agent_id"`
	IPPort       string   `json:"ip_port"`
	BSID         uint64   `json:"bs_id"`
	Capabilities []string `json:"capabilities"`
	Splits       []string `json:"splits"`
}

type plmn struct {
	MCC       int `json:"mcc"`
	MNC       int `json:"mnc"`
	MNCLength int `json:"mncLength"`
}

type sliceDir struct {
	Algorithm string `json:"algorithm"`
	Scheduler string `json:"scheduler"`
}

type cellConfig struct {
	PhyCellID                  int       `json:"phyCellId"`
	PuschHoppingOffset         int       `json:"puschHoppingOffset"`
	HoppingMode                int       `json:"hoppingMode"`
	NSb                        int       `json:"nSb"`
	PhichResource              int       `json:"phichResource"`
	PhichDuration              int       `json:"phichDuration"`
	InitNrPDCCHOFDMSym         int       `json:"initNrPDCCHOFDMSym"`
	SIConfig                   siConfig  `json:"siConfig"`
	DLBandwidth                int       `json:"dlBandwidth"`
	ULBandwidth                int       `json:"ulBandwidth"`
	ULCyclicPrefixLength       int       `json:"ulCyclicPrefixLength"`
	DLCyclicPrefixLength       int       `json:"dlCyclicPrefixLength"`
	AntennaPortsCount          int       `json:"antennaPortsCount"`
	DuplexMode                 int       `json:"duplexMode"`
	SubframeAssignment         int       `json:"subframeAssignment"`
	SpecialSubframePatterns    int       `json:"specialSubframePatterns"`
	PrachConfigIndex           int       `json:"prachConfigIndex"`
	PrachFreqOffset            int       `json:"prachFreqOffset"`
	RaResponseWindowSize       int       `json:"raResponseWindowSize"`
	MacContentionResolutionTmr int       `json:"macContentionResolutionTimer"`
	MaxHARQMsg3Tx              int       `json:"maxHARQMsg3Tx"`
	N1PUCCHAN                  int       `json:"n1PUCCHAN"`
	DeltaPUCCHShift            int       `json:"deltaPUCCHShift"`
	NRBCqi                     int       `json:"nRBCqi"`
	SrsSubframeConfig          int       `json:"srsSubframeConfig"`
	SrsBwConfig                int       `json:"srsBwConfig"`
	SrsMacUpPts                int       `json:"srsMacUpPts"`
	Enable64QAM                int       `json:"enable64QAM"`
	CarrierIndex               int       `json:"carrierIndex"`
	DLFreq                     float64   `json:"dlFreq"`
	ULFreq                     float64   `json:"ulFreq"`
	EutraBand                  int       `json:"eutraBand"`
	DLPdschPower               int       `json:"dlPdschPower"`
	ULPuschPower               int       `json:"ulPuschPower"`
	PLMNID                     []plmn    `json:"plmnId"`
	SliceConfig                sliceConf `json:"sliceConfig"`
	X2HoNetControl             bool      `json:"x2HoNetControl"`
}

type siConfig struct {
	SFN            int `json:"sfn"`
	SIB1Length     int `json:"sib1Length"`
	SIWindowLength int `json:"siWindowLength"`
}

type sliceConf struct {
	DL sliceDir `json:"dl"`
	UL sliceDir `json:"ul"`
}

type s1ap struct {
	Pending   uint32 `json:"pending"`
	Connected uint32 `json:"connected"`
	EnbS1IP   string `json:"enbS1Ip"`
}

type enb struct {
	Header     header       `json:"header"`
	CellConfig []cellConfig `json:"cellConfig"`
	S1AP       s1ap         `json:"s1ap"`
}

type ueCaps struct {
	HalfDuplex     int    `json:"halfDuplex"`
	IntraSFHopping uint32 `json:"intraSFHopping"`
	Type2Sb1       uint32 `json:"type2Sb1"`
	UECategory     int    `json:"ueCategory"`
	ResAllocType1  uint32 `json:"resAllocType1"`
}

type a3 struct {
	A3Offset       string `json:"a3Offset"`
	ReportOnLeave  int    `json:"reportOnLeave"`
	Hysteresis     string `json:"hysteresis"`
	TimeToTrigger  string `json:"timeToTrigger"`
	MaxReportCells string `json:"maxReportCells"`
}

type ueInfo struct {
	OffsetFreqServing      string   `json:"offsetFreqServing"`
	OffsetFreqNeighbouring string   `json:"offsetFreqNeighbouring"`
	CellIndividualOffset   []string `json:"cellIndividualOffset"`
	FilterCoefficientRsrp  string   `json:"filterCoefficientRsrp"`
	FilterCoefficientRsrq  string   `json:"filterCoefficientRsrq"`
	Event                  struct {
		A3 a3 `json:"a3"`
	} `json:"event"`
}

type ueConfig struct {
	RNTI                     uint16 `json:"rnti"`
	TimeAlignmentTimer       int    `json:"timeAlignmentTimer"`
	MeasGapConfigPattern     uint32 `json:"measGapConfigPattern"`
	MeasGapConfigSfOffset    uint32 `json:"measGapConfigSfOffset"`
	TransmissionMode         int    `json:"transmissionMode"`
	UEAggregatedMaxBitrateUL string `json:"ueAggregatedMaxBitrateUL"`
	UEAggregatedMaxBitrateDL string `json:"ueAggregatedMaxBitrateDL"`
	Capabilities             ueCaps `json:"capabilities"`
	UETransmissionAntenna    int    `json:"ueTransmissionAntenna"`
	TTIBundling              int    `json:"ttiBundling"`
	MaxHARQTx                int    `json:"maxHARQTx"`
	BetaOffsetACKIndex       int    `json:"betaOffsetACKIndex"`
	BetaOffsetRIIndex        int    `json:"betaOffsetRIIndex"`
	BetaOffsetCQIIndex       int    `json:"betaOffsetCQIIndex"`
	AckNackSimultaneousTr    int    `json:"ackNackSimultaneousTrans"`
	SimultaneousAckNackCqi   int    `json:"simultaneousAckNackCqi"`
	AperiodicCqiRepMode      int    `json:"aperiodicCqiRepMode"`
	TddAckNackFeedback       uint32 `json:"tddAckNackFeedback"`
	AckNackRepetitionFactor  int    `json:"ackNackRepetitionFactor"`
	ExtendedBsrSize          uint32 `json:"extendedBsrSize"`
	IMSI                     string `json:"imsi"`
	Info                     ueInfo `json:"info"`
	UEIPv4                   string `json:"ueIpv4"` // extension: see UEIPField
}

type lcConfig struct {
	LCID          int `json:"lcid"`
	LCG           int `json:"lcg"`
	Direction     int `json:"direction"`
	QosBearerType int `json:"qosBearerType"`
	QCI           int `json:"qci"`
}

type lcUEConfig struct {
	RNTI     uint16     `json:"rnti"`
	LCConfig []lcConfig `json:"lcConfig"`
}

type enbConfig struct {
	BSID      uint64      `json:"bs_id"`
	AgentInfo []agentInfo `json:"agent_info"`
	ENB       enb         `json:"eNB"`
	UE        struct {
		UEConfig []ueConfig `json:"ueConfig"`
	} `json:"UE"`
	LC struct {
		Header     header       `json:"header"`
		LCUEConfig []lcUEConfig `json:"lcUeConfig"`
	} `json:"LC"`
}

const notConfigured = 4294967295 // OAI's "unset" uint32, as in the live capture

// enbConfigEntry is a cell's eNB_config entry; withDRB lists each UE's data bearer (LCID 3),
// which OAI configures ~0.5 s after the UE.
func enbConfigEntry(c *ran.Cell, agentID int, listen string, withDRB bool) enbConfig {
	cfg := c.Cfg
	sched := map[string]string{"rr": "round_robin_dl", "pf": "proportional_fair_wbcqi_dl"}[cfg.Scheduler]
	cell := cellConfig{
		PhyCellID: cfg.PhyCellID, NSb: 1, InitNrPDCCHOFDMSym: 1,
		SIConfig:    siConfig{SIB1Length: 17, SIWindowLength: 5},
		DLBandwidth: cfg.PRB, ULBandwidth: cfg.PRB, AntennaPortsCount: 1, DuplexMode: 1,
		PrachFreqOffset: 2, RaResponseWindowSize: 7, MacContentionResolutionTmr: 5, DeltaPUCCHShift: 1,
		DLFreq: cfg.DLFreq, ULFreq: cfg.ULFreq, EutraBand: cfg.Band, DLPdschPower: -27, ULPuschPower: -96,
		PLMNID:      []plmn{{MCC: cfg.MCC, MNC: cfg.MNC, MNCLength: 2}},
		SliceConfig: sliceConf{DL: sliceDir{"None", sched}, UL: sliceDir{"None", "round_robin_ul"}},
	}
	e := enbConfig{
		BSID: cfg.BSID,
		AgentInfo: []agentInfo{{AgentID: agentID, IPPort: listen, BSID: cfg.BSID,
			Capabilities: []string{"LOPHY", "HIPHY", "LOMAC", "HIMAC", "RLC", "PDCP", "SDAP", "RRC", "S1AP"},
			Splits:       []string{}}},
		ENB: enb{Header: header{Type: 8}, CellConfig: []cellConfig{cell},
			S1AP: s1ap{Pending: notConfigured, Connected: notConfigured}},
	}
	e.LC.Header = header{Type: 12}
	e.UE.UEConfig = []ueConfig{}
	e.LC.LCUEConfig = []lcUEConfig{}
	for _, b := range c.Bearers() {
		e.UE.UEConfig = append(e.UE.UEConfig, ueConfigEntry(b, cfg.HARQ.MaxRetx))
		lcs := []lcConfig{{LCID: 1, LCG: 0, Direction: 2, QCI: 1}, {LCID: 2, LCG: 0, Direction: 2, QCI: 1}}
		if withDRB {
			lcs = append(lcs, lcConfig{LCID: 3, LCG: 1, Direction: 1, QCI: 1})
		}
		e.LC.LCUEConfig = append(e.LC.LCUEConfig, lcUEConfig{RNTI: b.Cfg.RNTI, LCConfig: lcs})
	}
	return e
}

func ueConfigEntry(b *ran.Bearer, maxRetx int) ueConfig {
	u := ueConfig{
		RNTI: b.Cfg.RNTI, TimeAlignmentTimer: 7, MeasGapConfigPattern: notConfigured,
		MeasGapConfigSfOffset: notConfigured, UEAggregatedMaxBitrateUL: "0", UEAggregatedMaxBitrateDL: "0",
		Capabilities: ueCaps{IntraSFHopping: notConfigured, Type2Sb1: notConfigured, UECategory: 4,
			ResAllocType1: notConfigured},
		UETransmissionAntenna: 2, MaxHARQTx: maxRetx, BetaOffsetCQIIndex: 8, AperiodicCqiRepMode: 3,
		TddAckNackFeedback: notConfigured, ExtendedBsrSize: notConfigured, IMSI: b.UE.Cfg.IMSI,
		UEIPv4: b.Cfg.IP.String(),
	}
	u.Info = ueInfo{OffsetFreqServing: "0", OffsetFreqNeighbouring: "0", CellIndividualOffset: []string{"0"},
		FilterCoefficientRsrp: "4", FilterCoefficientRsrq: "4"}
	u.Info.Event.A3 = a3{A3Offset: "0", ReportOnLeave: 1, Hysteresis: "0", TimeToTrigger: "40", MaxReportCells: "2"}
	return u
}
