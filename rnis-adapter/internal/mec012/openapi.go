package mec012

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	swaggerFiles "github.com/swaggo/files/v2"
	"gopkg.in/yaml.v3"
)

//go:embed spec/RniAPI.yaml spec/extension.yaml
var specFiles embed.FS

// implemented lists the official paths (and methods) the adapter serves.
var implemented = map[string][]string{
	"/queries/rab_info":               {"get"},
	"/queries/plmn_info":              {"get"},
	"/queries/layer2_meas":            {"get"},
	"/subscriptions":                  {"get", "post"},
	"/subscriptions/{subscriptionId}": {"get", "put", "delete"},
}

// OpenAPI builds the document the adapter serves: the official MEC 012 spec reduced to what
// is implemented, plus the extension, the bearer security scheme and this server's URL.
func OpenAPI(publicURL string) (map[string]any, error) {
	doc, err := loadYAML("spec/RniAPI.yaml")
	if err != nil {
		return nil, err
	}
	ext, err := loadYAML("spec/extension.yaml")
	if err != nil {
		return nil, err
	}
	paths := doc["paths"].(map[string]any)
	for path, item := range paths {
		methods, ok := implemented[path]
		if !ok {
			delete(paths, path)
			continue
		}
		ops := item.(map[string]any)
		for m := range ops {
			if !contains(methods, m) {
				delete(ops, m)
			}
		}
	}
	for path, item := range ext["paths"].(map[string]any) {
		paths[path] = item
	}
	components := doc["components"].(map[string]any)
	schemas := components["schemas"].(map[string]any)
	for name, s := range ext["schemas"].(map[string]any) {
		schemas[name] = s
	}
	components["securitySchemes"] = map[string]any{
		"bearer": map[string]any{"type": "http", "scheme": "bearer",
			"description": "A static token (RNIS_API_TOKENS, or the generated one in STATE_DIR/rnis-adapter.token), or an OAuth2 access token issued by the MEC platform"},
	}
	doc["security"] = []any{map[string]any{"bearer": []any{}}}
	doc["servers"] = []any{map[string]any{"url": publicURL + Base}}
	info := doc["info"].(map[string]any)
	info["description"] = fmt.Sprint(info["description"], " Served by the MEC transport suite's rnis-adapter from FlexRAN statistics:",
		" the implemented paths of the official document, plus the extension /queries/ext/ran_meas (x-mts-extension).",
		" Subscription types: CellChangeSubscription, RabEstSubscription, RabModSubscription, RabRelSubscription, MeasRepUeSubscription;",
		" from v2.2.1: requestTestNotification and websockNotifConfig (the websocket at /websockets/{subscriptionId}, x-mts-extension).")
	return doc, nil
}

func loadYAML(name string) (map[string]any, error) {
	raw, err := specFiles.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return stringKeys(v).(map[string]any), nil
}

// stringKeys makes every mapping key a string (YAML allows `204:`; JSON does not).
func stringKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = stringKeys(e)
		}
		return t
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[fmt.Sprint(k)] = stringKeys(e)
		}
		return out
	case []any:
		for i, e := range t {
			t[i] = stringKeys(e)
		}
	}
	return v
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// docsRoutes serves the OpenAPI document and an offline Swagger UI.
func docsRoutes(mux *http.ServeMux, doc map[string]any) error {
	asJSON, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		return err
	}
	asYAML, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(asJSON)
	})
	mux.HandleFunc("GET /openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(asYAML)
	})
	assets, err := fs.Sub(swaggerFiles.FS, ".")
	if err != nil {
		return err
	}
	static := http.StripPrefix("/docs/", http.FileServerFS(assets))
	mux.HandleFunc("GET /docs", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/docs/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /docs/{file...}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("file") {
		case "", "index.html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(swaggerPage))
		case "swagger-initializer.js":
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = w.Write([]byte(swaggerInit))
		default:
			static.ServeHTTP(w, r)
		}
	})
	return nil
}

var swaggerPage = strings.TrimSpace(`
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<title>RNIS adapter: ETSI MEC 012 API</title>
<link rel="stylesheet" type="text/css" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/swagger-ui-standalone-preset.js"></script>
<script src="/docs/swagger-initializer.js"></script>
</body>
</html>`)

const swaggerInit = `window.onload = function () {
  window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset], layout: "StandaloneLayout"});
};
`
