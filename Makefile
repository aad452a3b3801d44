# kansoku: `make up` runs the observatory of this host; `make test` runs every check.
# Both work on a fresh Debian 12 machine as root (missing packages come from apt-get).

CARGO        ?= cargo
DATA         ?= kansoku-data
LISTEN       ?= 127.0.0.1:7070
INTERVAL     ?= 100ms
# A targets file to poll by SNMP beside the host (see docs/snmp.md); empty: none.
SNMP_TARGETS ?=
# Seconds of fuzzing per target in `make test` (CI); raise it locally for a deeper run.
FUZZ_SECONDS ?= 20
# Where cargo puts what it builds: the user's CARGO_TARGET_DIR if set.
BIN := $(abspath $(or $(CARGO_TARGET_DIR),target))/release/kansoku

.PHONY: up build web test deps lint unit webtest fuzz deb debtest rehearse bench bench-dashboard screenshots soak clean

up: build
	$(BIN) up --data $(DATA) --listen $(LISTEN) --interval $(INTERVAL) \
		$(if $(SNMP_TARGETS),--snmp-targets $(SNMP_TARGETS))

build: web
	scripts/deps.sh build
	$(CARGO) build --release --locked -p kansoku

# The dashboard (TypeScript + uPlot, web/): bundled into web/dist, which the
# api crate embeds in the binary.
web: web/node_modules/.package-lock.json
	cd web && npm run --silent build

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error

test: deps web lint unit webtest fuzz debtest rehearse

deps:
	scripts/deps.sh test

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --workspace --release --locked

# Type check, unit tests of the data transforms, and the end-to-end test in
# headless Chromium against the real binary (screenshots in web/e2e-out/).
webtest: build
	cd web && npx --no-install tsc --noEmit -p . && npm test --silent && KANSOKU_BIN=$(BIN) npm run --silent e2e

fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

# The Debian package (cargo-deb), in packaging/out/: the binary, its manual
# pages generated from the command line, the docs, /etc/kansoku/kansoku.toml
# and the systemd units of packaging/systemd (docs/deploy.md); its debug
# symbols in kansoku-dbgsym (.ddeb) beside it.
DEB_VERSION ?=
deb: build
	scripts/deps.sh deb
	rm -rf packaging/out/man && $(BIN) config man packaging/out/man
	$(CARGO) deb -p kansoku --no-build --dbgsym --output packaging/out/ $(if $(DEB_VERSION),--deb-version $(DEB_VERSION))

# The package installed, upgraded, removed and purged (dpkg) inside a
# throw-away overlay of this machine's root, its units verified, lintian.
debtest: deb
	scripts/deb-test.sh packaging/out

# A server and two agents from the package, each in its own network
# namespace and overlay of this machine's root; one agent upgraded; nothing
# lost (docs/deploy.md).
rehearse: deb
	scripts/rehearse.sh packaging/out

# Benchmarks: not part of `make test`; results go to docs/benchmarks.md.
bench: build
	scripts/deps.sh bench
	$(BIN) lab collector-cost --interval 100ms --duration 60s
	$(BIN) lab collector-cost --interval 10ms --duration 60s
	$(BIN) lab up-cost --duration 90s --variant default= --variant "local-fsync-always=--local-fsync always" --variant "trace-off=--trace off"
	$(BIN) lab up-cost --interval 1s --duration 60s --idle-processes 240 --variant "trace-off=--trace off" --variant "processes=--trace off --processes 1s" --peers pidstat,pcp-proc,netdata-apps
	$(BIN) lab trace-cost --calls 2000000 --rounds 3
	$(BIN) lab diagnose --phase 30s --rounds 2 --json kansoku-diagnose.json
	scripts/bench-load.sh $(BIN) 5
	$(BIN) lab snmp --targets 241,1000,10000 --interval 100ms --duration 10s
	rm -rf /tmp/kansoku-bench-store
	$(BIN) lab store --span 1h --events 10000000 --data /tmp/kansoku-bench-store
	scripts/bench-store-peers.sh /tmp/kansoku-bench-store
	scripts/bench-write-peers.py $(BIN)
	$(CARGO) run --release --locked -p promql --example tier_speed
	$(BIN) lab promql --span 40m --repeat 5
	$(BIN) lab transfer --agents 1,5,20 --intervals 100ms,10ms --duration 20s
	$(BIN) lab transfer --cores 1,2,4,8,14,16,28 --rounds 10 --out /tmp/kansoku-replay.json
	$(BIN) lab interference --repeat 2 --out /tmp/kansoku-interference.json
	$(BIN) lab report /tmp/kansoku-replay.json /tmp/kansoku-interference.json --out kansoku-lab-report.html

# A server under a hostile client mix beside a healthy agent (SOAK=10m by
# default): bounded memory and descriptors, nothing of the agent lost.
soak: build
	$(BIN) lab soak --duration $(or $(SOAK),10m) --out kansoku-soak.json

# The dashboard with 256 synthetic hosts x 16 cores at 10 Hz: frame time and
# browser memory in headless Chromium (MINUTES=10 by default); then the host
# view's weight on a real `up --perf 1000 --perf-callchain` server: its CPU,
# the bytes sent, the longest live stall, a 15-minute flame graph (15 min).
bench-dashboard: build
	scripts/deps.sh test
	cd web && KANSOKU_BIN=$(BIN) npm run --silent bench -- --minutes $(or $(MINUTES),10)
	cd web && KANSOKU_BIN=$(BIN) npm run --silent bench:host -- --minutes $(or $(MINUTES),15)

# The pictures in docs/dashboard.md: the Chromium test's, copied.
SCREENSHOTS = host-alert host-profile processes host-load-runs cluster server-agents cluster-snmp-silent disk lab-latency lab-limits lab-run

screenshots: webtest
	mkdir -p docs/screenshots
	for s in $(SCREENSHOTS); do cp web/e2e-out/$$s.png docs/screenshots/; done

clean:
	$(CARGO) clean
	rm -rf web/dist web/dist-test web/e2e-out
