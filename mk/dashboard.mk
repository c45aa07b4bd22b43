# dashboard: the live web dashboard of the MEC host (Python mec_dashboard, a MEC
# app of its own registered on Mp1). docs/dashboard.md
# chromium + chromium-driver: the browser its test drives; nodejs: npm bundles the charting
# library (uPlot, from the npm registry) at build time, so nothing comes from a CDN at run time.
APT_PACKAGES += chromium chromium-driver nodejs
DASHBOARD_NPM := dashboard/npm
DASHBOARD_ASSETS := build/dashboard/assets
BUILD_TARGETS += $(DASHBOARD_ASSETS)/uPlot.iife.min.js
TEST_TARGETS += test-dashboard

# npm ci checks the locked integrity (sha512) of every package it installs.
$(DASHBOARD_ASSETS)/uPlot.iife.min.js: $(DASHBOARD_NPM)/package.json $(DASHBOARD_NPM)/package-lock.json
	@command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends npm
	@mkdir -p build/dashboard/npm $(@D)
	cp $(DASHBOARD_NPM)/package.json $(DASHBOARD_NPM)/package-lock.json build/dashboard/npm/
	cd build/dashboard/npm && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	cp build/dashboard/npm/node_modules/uplot/dist/uPlot.min.css $(@D)/
	cp build/dashboard/npm/node_modules/uplot/dist/uPlot.iife.min.js $@

.PHONY: test-dashboard
test-dashboard: python rabbitmq build ## dashboard: sign-in and access control, lost backends, and a headless Chromium against the running emulated system (screenshots in build/test-dashboard/)
	uv run pytest -q dashboard/tests

BENCH_TARGETS += bench-dashboard
.PHONY: bench-dashboard
bench-dashboard: python rabbitmq build ## dashboard: CPU with 64 UEs at 8 ms polling (no page / page open in Chromium) and first paint -> docs/results/dashboard/
	uv run python -m mts_lab.dashboard.bench --out docs/results/dashboard
