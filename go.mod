module mts.invalid/suite

go 1.24

require (
	github.com/goccy/go-json v0.10.5
	github.com/valyala/fastjson v1.6.10
	golang.org/x/sys v0.21.0
)
