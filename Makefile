# Two commands set up a fresh machine: `make demo` and `make test` (each installs what it needs).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1

.PHONY: install browser xvfb lint test sweep demo reproduce nano baseline bench verified labelstudio clean

$(VENV)/.installed: requirements.txt requirements-dev.txt requirements-reproduce.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt -r requirements-reproduce.txt
	touch $@

# A Chromium for Playwright: $$MAG_CHROMIUM, Playwright's own, or a system one; installed if none.
browser: $(VENV)/.installed
	@$(PY) -c "import collect; collect.find_chromium(collect.playwright_chromium())" 2>/dev/null || \
	  (command -v apt-get >/dev/null && (apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium))) || \
	  $(PY) -m playwright install chromium
	@$(PY) -c "import collect; print('browser:', collect.find_chromium(collect.playwright_chromium()) or 'playwright chromium')"

# Xvfb: the human-recorder test runs a headed browser on a virtual screen (skipped without it).
xvfb:
	@command -v Xvfb >/dev/null || ! command -v apt-get >/dev/null || apt-get install -y -q xvfb || \
	  (apt-get update -q && apt-get install -y -q xvfb) || echo "xvfb not installed: the human-recorder test will be skipped"

install: $(VENV)/.installed browser

# pyflakes, import order, 110 columns in the stage scripts, 120 elsewhere (ruff.toml)
lint: $(VENV)/.installed
	$(PY) -m ruff check .

# verified: WebArena-Verified's judge, labelstudio: the annotation studio, so their tests run (they skip,
# saying why, without them)
test: install xvfb lint verified labelstudio
	$(PY) -m pytest -q tests

# the suites' experts on every template and their evaluators on every task (make test runs a third of the
# templates and one task of each): run it before a change to a suite's experts or evaluators lands
sweep: install verified labelstudio
	MAG_SWEEP=1 $(PY) -m pytest -q tests/test_backoffice_suite.py tests/test_helpdesk_suite.py \
	    tests/test_shop_suite.py tests/test_cms_suite.py tests/test_labelstudio_suite.py

demo: install
	rm -rf demo
	$(PY) collect.py --suite miniwob --tasks click-button,login-user,use-autocomplete,book-flight --episodes 3 --seed 100 --workers 2 --out demo/miniwob --no-progress
	$(PY) metrics.py som demo/miniwob demo/som --n 6
	$(PY) annotate.py draft demo/miniwob --drafter template
	$(PY) annotate.py verify demo/miniwob --accept-drafts
	$(PY) annotate.py paraphrase demo/miniwob --drafter template
	$(PY) annotate.py split demo/miniwob --val 0.2 --test 0.2
	$(PY) annotate.py audit demo/miniwob
	$(PY) evaluate.py --suite backoffice --tasks close-ticket,deactivate-product --policy expert --episodes 2 --workers 2 --out demo/eval --no-progress
	$(PY) evaluate.py --playback demo/eval --episode backoffice.close-ticket.0
	$(PY) evaluate.py --suite helpdesk --tasks reply-and-resolve,merge-tickets --policy expert --episodes 1 --workers 2 --out demo/eval_helpdesk --no-progress
	$(PY) evaluate.py --suite shop --tasks process-order --policy expert --episodes 1 --out demo/eval_shop --no-progress
	$(PY) evaluate.py --suite cms --tasks publish-draft --policy expert --episodes 1 --out demo/eval_cms --no-progress
	$(PY) train_sft.py --data demo/miniwob --ckpt tiny --elements text --lr 2e-3 --warmup 5 --batch-size 4 --max-steps 60 --eval-every 30 --eval-gen-n 4 --max-new-tokens 96 --out demo/ckpt/sft --no-progress
	$(PY) train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --group-size 4 --prompts-per-step 2 --max-new-tokens 96 --lr 1e-4 --max-steps 8 --out demo/ckpt/grpo_expert --no-progress
	$(PY) train_grpo.py --ckpt demo/ckpt/sft --data demo/miniwob --group-size 4 --prompts-per-step 2 --max-new-tokens 96 --lr 1e-4 --max-steps 8 --expert off --out demo/ckpt/grpo --no-progress
	for m in sft grpo grpo_expert; do \
	  $(PY) replay.py --ckpt demo/ckpt/$$m --data demo/miniwob --split test --max-new-tokens 96 --out demo/runs/replay_$$m --no-progress > /dev/null && \
	  $(PY) evaluate.py --suite miniwob --tasks click-button,login-user,use-autocomplete,book-flight --policy ckpt --ckpt demo/ckpt/$$m \
	    --episodes 1 --seed 900 --max-steps 6 --max-new-tokens 96 --out demo/runs/live_$$m --no-progress > /dev/null || exit 1; \
	done
	$(PY) replay.py table SFT:demo/runs/replay_sft:demo/runs/live_sft GRPO:demo/runs/replay_grpo:demo/runs/live_grpo GRPO+expert:demo/runs/replay_grpo_expert:demo/runs/live_grpo_expert
	@echo "demo: dataset in demo/miniwob (guides drafted and auto-verified), Set-of-Mark images in demo/som,"
	@echo "      live evaluation reports of the experts, each step's guide drawn as a callout: the back office in"
	@echo "      demo/eval/report.html (guide playback in demo/eval/playback/), the service desk (django-helpdesk) in"
	@echo "      demo/eval_helpdesk/report.html, the shop (django-oscar) in demo/eval_shop/report.html, the CMS (Wagtail)"
	@echo "      in demo/eval_cms/report.html,"
	@echo "      checkpoints in demo/ckpt/{sft,grpo,grpo_expert}, replay (test split) and live (held-out seeds) runs in demo/runs/."
	@echo "      A tiny random-init model trained for minutes on a CPU scores near zero: the demo shows the chain runs, not what MAG can do."
	@echo "      An agent that does the task: make nano (about 50 minutes on 2 cores; its 1.4M-parameter SFT agent scored .49 test"
	@echo "      step success on MiniWoB++ and the back office, where always the most frequent action scores .21; docs/reproduce.md)."

# The small-scale reproduction of the MAG and WebMRE findings on the nano agents: make nano's runs (kept when
# make nano ran first: the same folder), WebMRE's mediation probes and decoding orders, at SEEDS training seeds
# (a rerun continues where it stopped): runs/nano/claims.md, results.json and plots/ (docs/reproduce.md).
# ORDERS=guide_first,action_first,action_only adds W4b's action-first SFT run. The first study, on the demo's
# tiny model: experiments/reproduce.py --out runs/reproduce.
SEEDS ?= 1
ORDERS ?= guide_first,action_only
reproduce: install
	$(PY) experiments/reproduce.py --recipe nano --seeds $(SEEDS) --orders $(ORDERS) --out runs/nano

# The nano recipe: a from-scratch 1.4M-parameter agent that does MiniWoB++'s tasks, then GRPO with and without
# the expert and continued SFT from it, scored offline and live beside the floors (a rerun continues):
# runs/nano/claims.md, results.json and plots/ (docs/reproduce.md).
nano: install
	$(PY) experiments/reproduce.py --recipe nano --mag-only --seeds 1 --out runs/nano

# MAG-Bench's own baseline: make nano's recipe trained on the benchmark's train split (built and checked
# first, or linked from SPLITS_FROM=DIR holding train/ val/ test/), scored on its test split per suite,
# offline and live, beside the expert and the random policy; a rerun continues (docs/benchmark.md).
BENCH ?= mag-v1.2
baseline: install
	$(PY) experiments/baseline.py --benchmark $(BENCH) --out runs/baseline_$(BENCH) $(if $(SPLITS_FROM),--splits-from $(SPLITS_FROM))

# TRL for bench/sft_throughput.py's baseline, kept out of .venv: a venv whose .pth file puts .venv's
# site-packages on its path, so it runs the very same torch and transformers and adds only TRL's own.
BENCH_SFT := .venv-bench-sft
$(BENCH_SFT)/.installed: requirements-bench.txt $(VENV)/.installed
	rm -rf $(BENCH_SFT)
	$(PY) -m venv $(BENCH_SFT)
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	  "$$($(BENCH_SFT)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/mag-main-venv.pth"
	$(BENCH_SFT)/bin/python -m pip install -q -r requirements-bench.txt
	touch $@

bench: install $(BENCH_SFT)/.installed
	$(PY) bench/env_step.py
	$(PY) bench/eval_throughput.py
	$(PY) bench/django_suites.py
	$(PY) bench/live_grpo_env.py
	$(PY) bench/replay_throughput.py
	$(PY) bench/sft_throughput.py
	$(PY) bench/grpo_step.py

# WebArena-Verified's judge (its evaluator package) in a venv of its own: the package pins pydantic and
# python-dateutil older than .venv's. envs/webarena.py calls it as a subprocess (envs/verified_judge.py).
VERIFIED := .venv-verified
$(VERIFIED)/.installed: requirements-verified.txt
	rm -rf $(VERIFIED)
	$(PYTHON) -m venv $(VERIFIED)
	$(VERIFIED)/bin/python -m pip install -q -r requirements-verified.txt
	touch $@

verified: $(VERIFIED)/.installed

# Label Studio (envs/labelstudio/) in a venv of its own: it pins its own Django stack. The suite runs its
# manage.py with this venv's Python (envs/labelstudio/suite.py).
LABELSTUDIO := .venv-labelstudio
$(LABELSTUDIO)/.installed: requirements-labelstudio.txt
	rm -rf $(LABELSTUDIO)
	$(PYTHON) -m venv $(LABELSTUDIO)
	$(LABELSTUDIO)/bin/python -m pip install -q -r requirements-labelstudio.txt
	touch $@

labelstudio: $(LABELSTUDIO)/.installed

clean:
	rm -rf $(VENV) .venv-bench .venv-bench-sft .venv-verified .venv-labelstudio demo .pytest_cache
