# The OpenAPI documents of every service, exported into docs/api/ (docs/api.md).
TEST_TARGETS += test-openapi

.PHONY: openapi test-openapi
openapi: python build ## export every service's OpenAPI document into docs/api/
	uv run python scripts/export_openapi.py

test-openapi: python build ## the committed OpenAPI documents match the services
	uv run python scripts/export_openapi.py --check
