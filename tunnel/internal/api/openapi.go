package api

import "encoding/json"

// OpenAPI is the API's OpenAPI 3.1 document (served at /openapi.json, exported to
// docs/api/tunnel.openapi.json by `make openapi`).
func OpenAPI(publicURL string) []byte {
	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
	jsonOf := func(schema map[string]any) map[string]any {
		return map[string]any{"application/json": map[string]any{"schema": schema}}
	}
	ok := func(desc string, schema map[string]any) map[string]any {
		return map[string]any{"description": desc, "content": jsonOf(schema)}
	}
	problem := map[string]any{"description": "ProblemDetails",
		"content": map[string]any{"application/problem+json": map[string]any{"schema": ref("ProblemDetails")}}}
	errs := func(r map[string]any, codes ...string) map[string]any {
		r["401"] = problem
		for _, c := range codes {
			r[c] = problem
		}
		return r
	}
	idParam := []any{map[string]any{"name": "id", "in": "path", "required": true,
		"schema": map[string]any{"type": "integer", "minimum": 1, "maximum": 255}}}
	obj := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	num, integer, str, boolean := map[string]any{"type": "number"}, map[string]any{"type": "integer"},
		map[string]any{"type": "string"}, map[string]any{"type": "boolean"}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "MEC Transport Suite multipath tunnel", "version": "1.0.0",
			"description": "Paths, per-path state, the ingress FQ-CoDel's flows, the scheduler, the configuration and the counters of one tunnel end (docs/tunnel.md)."},
		"servers":  []any{map[string]any{"url": publicURL}},
		"security": []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas": map[string]any{
				"ProblemDetails": obj(map[string]any{"type": str, "title": str, "status": integer, "detail": str, "instance": str}),
				"Path": obj(map[string]any{"id": integer, "enabled": boolean, "up": boolean, "cwndMode": str, "cwndBytes": integer,
					"inflightBytes": integer, "srttMs": num, "rttvarMs": num, "minRttMs": num, "rtoMs": num,
					"sentPackets": integer, "sentBytes": integer, "ackedPackets": integer, "lostPackets": integer,
					"probes": integer, "lossEvents": integer, "timeouts": integer, "local": str, "remote": str,
					"radio": obj(map[string]any{"ue": str, "capacityBps": num, "queueBytes": integer, "ageMs": num})}),
				"PathPatch": map[string]any{"type": "object", "required": []any{"enabled"}, "additionalProperties": false,
					"properties": map[string]any{"enabled": boolean}},
				"Flow": obj(map[string]any{"index": integer, "list": map[string]any{"enum": []any{"new", "old"}}, "packets": integer,
					"bytes": integer, "credits": integer, "headSojournMs": num, "dropping": boolean, "codelCount": integer, "drops": integer}),
				"Queue": obj(map[string]any{"discipline": str, "packets": integer, "bytes": integer, "limitBytes": integer,
					"oldestSojournMs": num, "drops": integer, "flows": map[string]any{"type": "array", "items": ref("Flow")}}),
				"Scheduler": map[string]any{"type": "object", "required": []any{"name"}, "properties": map[string]any{
					"name": map[string]any{"enum": []any{"rr", "lowrtt", "rnis"}}, "available": map[string]any{"type": "array", "items": str}}},
				"Stats": obj(map[string]any{"drops": map[string]any{"type": "object", "additionalProperties": integer},
					"rxPackets": integer, "rxBytes": integer, "txDatagrams": integer, "tunWriteFailures": integer,
					"tunReads": integer, "tunWrites": integer, "tunOffload": map[string]any{"enum": []any{"none", "tcp", "tcp+udp"}},
					"tunReader":         map[string]any{"enum": []any{"read", "io_uring"}},
					"peerAuthenticated": boolean, "reorder": obj(map[string]any{"held": integer, "inOrder": integer,
						"reordered": integer, "late": integer, "skipped": integer, "lost": integer, "duplicates": integer, "unordered": integer}),
					"goSchedLatency": obj(map[string]any{"count": integer, "over100us": integer, "over1ms": integer, "over5ms": integer})}),
			},
		},
		"paths": map[string]any{
			"/tunnel/v1/paths": map[string]any{"get": map[string]any{"summary": "every path and its state",
				"responses": errs(map[string]any{"200": ok("paths", map[string]any{"type": "array", "items": ref("Path")})})}},
			"/tunnel/v1/paths/{id}": map[string]any{"parameters": idParam,
				"get": map[string]any{"summary": "one path's state",
					"responses": errs(map[string]any{"200": ok("the path", ref("Path"))}, "400", "404")},
				"patch": map[string]any{"summary": "enable or disable a path (the path manager's actuator)",
					"requestBody": map[string]any{"required": true, "content": jsonOf(ref("PathPatch"))},
					"responses":   errs(map[string]any{"200": ok("the path", ref("Path"))}, "400", "404")}},
			"/tunnel/v1/queue": map[string]any{"get": map[string]any{"summary": "the ingress queue and its active flows",
				"responses": errs(map[string]any{"200": ok("queue", ref("Queue"))})}},
			"/tunnel/v1/scheduler": map[string]any{
				"get": map[string]any{"summary": "the path scheduler", "responses": errs(map[string]any{"200": ok("scheduler", ref("Scheduler"))})},
				"put": map[string]any{"summary": "switch the path scheduler",
					"requestBody": map[string]any{"required": true, "content": jsonOf(ref("Scheduler"))},
					"responses":   errs(map[string]any{"200": ok("scheduler", ref("Scheduler"))}, "400")}},
			"/tunnel/v1/config": map[string]any{"get": map[string]any{"summary": "the effective configuration (no key)",
				"responses": errs(map[string]any{"200": ok("configuration", map[string]any{"type": "object"})})}},
			"/tunnel/v1/stats": map[string]any{"get": map[string]any{"summary": "counters: drops by reason, reorder buffer",
				"responses": errs(map[string]any{"200": ok("counters", ref("Stats"))})}},
		},
	}
	raw, _ := json.MarshalIndent(doc, "", "  ")
	return raw
}
