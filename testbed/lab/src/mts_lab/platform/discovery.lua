-- wrk script: service discovery by name, cycling over the registered services.
-- Environment: MTS_TOKEN (bearer token), MTS_SERVICES (how many), MTS_QUERY (name|all).
local token = os.getenv("MTS_TOKEN")
local count = tonumber(os.getenv("MTS_SERVICES"))
local query = os.getenv("MTS_QUERY")
local i = 0

request = function()
  i = (i + 1) % count
  local path = "/mec_service_mgmt/v1/services"
  if query == "name" then
    path = path .. string.format("?ser_name=svc-%04d", i)
  end
  return wrk.format("GET", path, {["Authorization"] = "Bearer " .. token})
end

done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, ' ..
    '"latency_us": {"p50": %d, "p90": %d, "p99": %d, "p999": %d, "max": %d, "mean": %.1f}}\n',
    summary.requests, summary.duration, errors.status,
    errors.connect + errors.read + errors.write + errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
