"""`python -m train.whatif RUN_ID`: predict what each move would do to a configuration, log the
predictions, run the moves, and score each prediction against its measurement.

From a train (or breakdown) run: every one-knob move of its configuration on this device
(precision, channels_last, torch.compile, batch x2 and /2, loader workers) gets a predicted
speed-up interval from the configuration's breakdown, the device's measured ceilings and the batch
series' fit (roofline/whatif.py); a `whatif` run holds them, sent before any counterfactual
starts. The counterfactuals are ordinary train runs of the original configuration but one knob,
`--repeats` passes of the original and every move through the sweep engine (resume, failure
isolation, claims: train/sweep); `--budget-s` leaves out what will not fit, saying so. Each move
then gets its measured speed-up with a 95 % interval and a verdict: held, beaten, missed, not
predicted or not judged (roofline/scoring.py). See docs/whatif.md.

* `source`: what the store holds of the original (its config, breakdown rows, ceilings, fit).
* `plan`: the moves, the sweep that runs them, the budget.
* `measured`: each configuration's numbers from its runs, a move's speed-up and interval; pure.
* `runlog`: the `whatif` run's predictions and checks.
* `loop`: the whole what-if; `__main__`: the command line.
"""
