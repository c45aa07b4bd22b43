# path-manager: predictive multipath path manager (Python package path_manager).
TEST_TARGETS += test-pathmgr
BENCH_TARGETS += bench-pathmgr
EXPERIMENT_TARGETS += experiment-pathmgr-sim experiment-pathmgr experiment-pathmgr-mptcp

PATHMGR_RESULTS := docs/results/pathmgr

.PHONY: test-pathmgr bench-pathmgr experiment-pathmgr-sim

test-pathmgr: python rabbitmq build/bin/ran-emulator build/bin/rnis-adapter build/bin/tunnel ## path manager: predictor vs Monte Carlo, control timing, simulation, service, real MPTCP in netns, a short run on the emulated RAN over the tunnel and through the PEP
	uv run pytest -q path-manager/tests

bench-pathmgr: python ## path manager: prediction time p90 per number of paths, accuracy vs full model and Monte Carlo
	nice -n 10 uv run python -m mts_lab.pathmgr.bench --out $(PATHMGR_RESULTS)/predictor

experiment-pathmgr-sim: python ## path manager: the simulation study (8 paths, 2 Gbit/s, 100 runs x 70 s, T_R 25/50/100 ms)
	nice -n 10 uv run python -m mts_lab.pathmgr.study --runs 100 --workers 2 --out $(PATHMGR_RESULTS)/simulation

.PHONY: experiment-pathmgr experiment-pathmgr-mptcp
experiment-pathmgr: python rabbitmq build/bin/ran-emulator build/bin/rnis-adapter build/bin/tunnel ## path manager on the emulated RAN over the multipath tunnel, Table 7.2 scaled 1/50, 5 schemes x 5 runs x 45 s, same channel per run (root, ~35 min; split over lock holds: RUNS=1 SEED=n OUT=dir per hold, then mts_lab.pathmgr.experiment --merge dirs)
	nice -n 10 uv run python -m mts_lab.pathmgr.experiment --data-plane tunnel --runs $${RUNS:-5} --seed $${SEED:-1} --out $${OUT:-$(PATHMGR_RESULTS)/tunnel}

experiment-pathmgr-mptcp: python rabbitmq build/bin/ran-emulator build/bin/rnis-adapter ## path manager on the emulated RAN through the PEP (MPTCP RAN leg), the second data plane
	nice -n 10 uv run python -m mts_lab.pathmgr.experiment --data-plane mptcp --runs $${RUNS:-1} --out $(PATHMGR_RESULTS)/emulated
