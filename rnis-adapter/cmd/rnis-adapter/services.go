package main

import "net/url"

// serviceInfos are the two Mp1 registrations of the RNIS (MEC 011 ServiceInfoPost): the
// MEC 012 REST API and the AMQP feed. Consumers discover both by serName "rnis".
func serviceInfos(publicURL, amqpURL, exchange string) []map[string]any {
	category := map[string]any{"href": publicURL + "/rni/v2", "id": "RNI", "name": "RNI", "version": "v2"}
	base := func(transport map[string]any) map[string]any {
		return map[string]any{"serName": "rnis", "serCategory": category, "version": "2.1.1", "state": "ACTIVE",
			"serializer": "JSON", "scopeOfLocality": "MEC_HOST", "consumedLocalOnly": true, "isLocal": true,
			"transportInfo": transport}
	}
	return []map[string]any{
		base(map[string]any{"id": "rnis-rest", "name": "MEC 012 RNI API", "type": "REST_HTTP", "protocol": "HTTP",
			"version": "1.1", "endpoint": map[string]any{"uris": []string{publicURL + "/rni/v2"}},
			"security": map[string]any{}}),
		base(map[string]any{"id": "rnis-amqp", "name": "RNIS feed (AMQP topic exchange)", "type": "MB_TOPIC_BASED",
			"protocol": "AMQP", "version": "0.9.1", "endpoint": map[string]any{"uris": []string{publicAMQP(amqpURL)}},
			"security": map[string]any{}, "implSpecificInfo": map[string]any{"exchange": exchange,
				"exchangeType": "topic", "routingKeys": "rnis.v1.meas.<cell>.<imsi>.<ipv4>, rnis.v1.event.<kind>.<cell>.<imsi>.<ipv4>",
				"schema": "mec_common.bus.rnis.RnisMeasurement v1"}}),
	}
}

// publicAMQP is the broker URL without credentials (consumers have their own).
func publicAMQP(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User = nil
	return u.String()
}
