"""A third-party schedule for the tests: 1F1B with one more warm-up forward per stage (made up)."""

from hp_core.markers import hookimpl
from hp_core.schedules import Schedule


def in_flight(layout, stage):
    return (min(layout.pp - stage + 1, layout.micro_batches),)


def pipeline_seconds(layout, stages):
    return (layout.micro_batches + layout.pp) * max(s.seconds for s in stages)


def default_micro_batches(pp, vpp):
    return pp + 1


@hookimpl
def hp_schedules():
    yield Schedule(name="slack-1f1b", in_flight=in_flight, pipeline_seconds=pipeline_seconds,
                   default_micro_batches=default_micro_batches, description="1F1B with one more warm-up forward")
