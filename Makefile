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

.PHONY: up build test deps lint unit fuzz bench clean

up: build
	./target/release/kansoku up --data $(DATA) --listen $(LISTEN) --interval $(INTERVAL) \
		$(if $(SNMP_TARGETS),--snmp-targets $(SNMP_TARGETS))

build:
	$(CARGO) build --release --locked -p kansoku

test: deps lint unit fuzz

deps:
	scripts/deps.sh test

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --workspace --release --locked

fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

# Benchmarks: not part of `make test`; results go to docs/benchmarks.md.
bench: build
	scripts/deps.sh bench
	./target/release/kansoku lab collector-cost --interval 100ms --duration 60s
	./target/release/kansoku lab collector-cost --interval 10ms --duration 60s
	./target/release/kansoku lab snmp --targets 241,1000,10000 --interval 100ms --duration 10s

clean:
	$(CARGO) clean
