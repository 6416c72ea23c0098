#!/usr/bin/env python3
"""A precision plan (`bitnet calibrate -o PLAN`) laid over another number of layers: layer i
of N takes the settings of the plan's layer i * len // N (the same relative depth), as
`PrecisionPlan::stretched` does. For trying a calibrated plan's mix of formats on another
shape of the same family (scripts/plan-table.sh lays the shipped model's plans over the
2B-4T shape); a calibrated plan is only exact for its own model. The calibration record
is dropped: it does not describe the new plan.

    scripts/plan-stretch.py PLAN.json N > PLAN-N.json
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 3 or not sys.argv[2].isdigit() or int(sys.argv[2]) == 0:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    plan = json.load(open(sys.argv[1]))
    layers, n = plan["layers"], int(sys.argv[2])
    plan["layers"] = [layers[i * len(layers) // n] for i in range(n)]
    plan.pop("calibration", None)
    json.dump(plan, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
