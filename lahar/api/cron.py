"""Cron schedules as Kubernetes' (and Volcano's) CronJob reads them: five fields (minute, hour,
day of month, month, day of week) with `*`, `?` (as `*`), lists, ranges, steps and month/day
names, or a descriptor (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`,
`@hourly`), or `@every <Go duration>` (`@every 1h30m`: robfig/cron's constant delay, which
Kubernetes and Volcano accept). As in cron, when both day fields are restricted a day matching
either runs. A `TZ=`/`CRON_TZ=` prefix is refused: the CronJob's `timeZone` field says that.

`parse_schedule` raises CronError with a message naming the bad field; `next_after` gives the
first scheduled time strictly after a moment: a whole minute in the schedule's time zone for the
five fields, the moment (to the second) plus the delay for `@every`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from lahar.api.job import parse_duration

DESCRIPTORS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = {
    name: i
    for i, name in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)
}
DAY_NAMES = {name: i for i, name in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
# (name, lowest, highest, names)
FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, MONTH_NAMES),
    ("day of week", 0, 6, DAY_NAMES),
)
SEARCH_YEARS = 5  # a schedule that matches nothing within this long (Feb 30) never runs
EVERY = "@every "
GO_MAX_DURATION_SECONDS = (2**63 - 1) / 1e9  # time.Duration's range, which robfig/cron parses into


class CronError(ValueError):
    pass


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool  # day of month is `*`
    any_weekday: bool  # day of week is `*`

    def _day_matches(self, moment: datetime) -> bool:
        weekday = (moment.weekday() + 1) % 7  # cron: Sunday is 0
        by_day, by_weekday = moment.day in self.days, weekday in self.weekdays
        if self.any_day or self.any_weekday:
            return by_day and by_weekday
        return by_day or by_weekday

    def next_after(self, moment: datetime) -> datetime | None:
        """The first minute after `moment` (aware; compared in its own time zone) that matches,
        or None when none does within SEARCH_YEARS."""
        current = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
        limit = moment + timedelta(days=366 * SEARCH_YEARS)
        while current <= limit:
            if current.month not in self.months:
                year, month = (current.year + 1, 1) if current.month == 12 else (current.year, current.month + 1)
                current = current.replace(year=year, month=month, day=1, hour=0, minute=0)
            elif not self._day_matches(current):
                current = (current + timedelta(days=1)).replace(hour=0, minute=0)
            elif current.hour not in self.hours:
                current = (current + timedelta(hours=1)).replace(minute=0)
            elif current.minute not in self.minutes:
                current += timedelta(minutes=1)
            else:
                return current
        return None


@dataclass(frozen=True)
class EverySchedule:
    """`@every <duration>`: a run every `delay` after the last one, as robfig/cron's
    ConstantDelaySchedule: whole seconds (a fraction is dropped, less than a second is one), the
    next time is the moment less its fraction of a second plus the delay."""

    delay: timedelta

    def next_after(self, moment: datetime) -> datetime:
        return moment.replace(microsecond=0) + self.delay


def _every(spec: str) -> EverySchedule:
    duration_text = spec[len(EVERY) :].strip()
    try:
        seconds = parse_duration(duration_text)
    except ValueError:
        raise CronError(
            f'@every: "{duration_text}" is not a duration (a Go duration such as "90s", "15m" or "1h30m")'
        ) from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise CronError(f'@every: the interval must be positive, not "{duration_text}"')
    if seconds > GO_MAX_DURATION_SECONDS:
        raise CronError(f'@every: "{duration_text}" is longer than a Go duration holds (about 292 years)')
    # robfig/cron: under a second runs every second; a fraction of a second is dropped.
    return EverySchedule(timedelta(seconds=max(1, int(seconds))))


def _value(text: str, field: str, low: int, high: int, names: dict[str, int]) -> int:
    value = names.get(text.lower())
    if value is None:
        if not text.isdigit():
            raise CronError(f'{field}: "{text}" is not a number' + (" or a name" if names else ""))
        value = int(text)
    if field == "day of week" and value == 7:
        value = 0  # Sunday, written 7
    if not low <= value <= high:
        raise CronError(f"{field}: {value} is out of range {low}-{high}")
    return value


def _field(text: str, field: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f'{field}: empty item in "{text}"')
        body, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f'{field}: step "{step_text}" must be a positive number')
            step = int(step_text)
        if body in ("*", "?"):
            start, end = low, high
        elif "-" in body:
            first, _, last = body.partition("-")
            start, end = _value(first, field, low, high, names), _value(last, field, low, high, names)
            if start > end:
                raise CronError(f'{field}: range "{body}" runs backwards')
        else:
            start = _value(body, field, low, high, names)
            end = high if slash else start
        values.update(range(start, end + 1, step))
    return frozenset(values)


def parse_schedule(text: str) -> Schedule | EverySchedule:
    spec = text.strip()
    if spec.upper().startswith(("TZ=", "CRON_TZ=")):
        raise CronError("a time zone in the schedule is not allowed: set spec.timeZone")
    if spec.lower().startswith(EVERY):
        return _every(spec)
    spec = DESCRIPTORS.get(spec.lower(), spec)
    if spec.startswith("@"):
        raise CronError(f'unknown descriptor "{spec}" (known: {", ".join(DESCRIPTORS)}, @every <duration>)')
    parts = spec.split()
    if len(parts) != len(FIELDS):
        raise CronError(f'expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)} in "{text}"')
    minutes, hours, days, months, weekdays = (_field(part, *field) for part, field in zip(parts, FIELDS, strict=True))
    return Schedule(
        minutes, hours, days, months, weekdays, any_day=parts[2] in ("*", "?"), any_weekday=parts[4] in ("*", "?")
    )
