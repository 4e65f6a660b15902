/**
 * Cron expressions (D15) as `croner` reads them, in an IANA time zone, and the two questions the
 * scheduler asks: the first scheduled time after a moment (`nextAfter`), and the latest scheduled
 * time at or before now (`latestAtOrBefore`, for firings missed while no process ran). Pure: no
 * clock, no timers (croner's own scheduling is never used).
 *
 * Times are whole seconds. Daylight saving time is croner's: a wall-clock time that does not exist
 * on the spring-forward day runs at the same offset past the gap (02:30 in Europe/Berlin runs at
 * 03:30 CEST), and a wall-clock time that occurs twice on the fall-back day runs once, at its first
 * occurrence (02:30 CEST, not 02:30 CET). croner answers a moment inside the repeated hour with
 * times of its first occurrence, which lie before that moment; `nextAfter` never goes back.
 */
import { Cron, CronPattern } from "croner"
import { Either } from "effect"

/** A cron expression with its time zone, ready to ask. */
export interface Schedule {
  readonly cron: Cron
}

export interface CronProblem {
  readonly param: "cron" | "timezone"
  readonly message: string
}

const NICKNAME = /^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$/i
/** What the fields of a cron expression may hold (croner's syntax: ranges, steps, lists, names, `L`, `W`, `#`, `?`, `+`). */
const FIELD = /^[0-9A-Za-z*?,/#+-]+$/
/** An IANA zone name as written (`Europe/Berlin`, `Etc/GMT+5`, `UTC`): no UTC offsets, no ISO strings. */
const ZONE = /^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/

/** Whether the platform's Intl (the one croner uses) knows the IANA zone `timezone`. */
export const isTimezone = (timezone: string): boolean => {
  if (!ZONE.test(timezone)) return false
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: timezone })
    return true
  } catch {
    return false
  }
}

/**
 * The expression in the zone, or why it is refused: five fields, six with seconds first, or a
 * nickname, that croner reads; an IANA zone Intl knows.
 */
export const compile = (cron: string, timezone: string): Either.Either<Schedule, CronProblem> => {
  const text = cron.trim()
  const fields = text.split(/\s+/)
  if (!NICKNAME.test(text) && (fields.length < 5 || fields.length > 6 || !fields.every((f) => FIELD.test(f)))) {
    return Either.left({
      param: "cron",
      message: "cron must have 5 fields (minute hour day-of-month month day-of-week), 6 with seconds first, or be a nickname " +
        "such as @hourly"
    })
  }
  if (!isTimezone(timezone)) {
    return Either.left({ param: "timezone", message: "timezone must be an IANA time zone name such as Europe/Berlin or UTC" })
  }
  try {
    return Either.right({ cron: new Cron(text, { timezone, paused: true, mode: "5-or-6-parts" }) })
  } catch (e) {
    return Either.left({ param: "cron", message: `cron is not valid: ${e instanceof Error ? e.message.replace(/^CronPattern: /, "") : e}` })
  }
}

/** As `compile`, and refused too when it never fires after `now` (`0 0 30 2 *`). */
export const parse = (cron: string, timezone: string, now: Date): Either.Either<Schedule, CronProblem> =>
  Either.flatMap(
    compile(cron, timezone),
    (schedule) =>
      nextAfter(schedule, now) === undefined ? Either.left({ param: "cron", message: "cron never fires" }) : Either.right(schedule)
  )

const DAY_SECONDS = 86_400

/**
 * The shortest time, in seconds, between two consecutive times of a cron expression that
 * `compile` accepted, read on its wall clock: from its second, minute and hour fields only. Its
 * times of day are the product of those three sets, the same on every day it fires, so the answer
 * is the smallest gap between consecutive times of one day, or across midnight as if the next day
 * fired too (`30 0,23 * * *`: 23:30 and 00:30, an hour apart, even when it fires on the 1st only);
 * day-of-month, month and day-of-week only choose days. It does not depend on the time zone: a daylight-saving change can bring two
 * times closer once, by at most its shift (`1,59 1,3 * * *` in Europe/Berlin: 01:59 CET and 03:01
 * CEST on the spring-forward day), and never makes a legal expression illegal. Bounded: at most
 * 24 * 60 * 60 steps of arithmetic (`* * * * * *`), no date computations.
 */
export const shortestGapSeconds = (cron: string): number => {
  const pattern = new CronPattern(cron.trim(), undefined, { mode: "5-or-6-parts" })
  const on = (flags: ReadonlyArray<number>) => flags.flatMap((flag, i) => (flag ? [i] : []))
  const seconds = on(pattern.second)
  const minutes = on(pattern.minute)
  const hours = on(pattern.hour)
  let first: number | undefined
  let previous: number | undefined
  let shortest = DAY_SECONDS
  for (const h of hours) {
    for (const m of minutes) {
      for (const sec of seconds) {
        const t = h * 3600 + m * 60 + sec
        if (previous === undefined) first = t
        else shortest = Math.min(shortest, t - previous)
        previous = t
      }
    }
  }
  return first === undefined || previous === undefined ? DAY_SECONDS : Math.min(shortest, DAY_SECONDS - previous + first)
}

/** croner's next time after `t`, or undefined (none, or croner failed). */
const next = (s: Schedule, t: number): number | undefined => {
  try {
    return s.cron.nextRun(new Date(t))?.getTime()
  } catch {
    return undefined
  }
}

/**
 * The first scheduled time after `t`, or undefined when there is none. Inside the repeated hour of
 * a fall-back croner answers with times of its first occurrence, before `t`: then the question is
 * asked again further on (1 s, 2 s, 4 s... past `t`, up to 9 hours, past any repeated hour) until
 * an answer lies after `t`, and a binary search between the last two questions finds the earliest
 * such answer (the first time after the repeated hour). Bounded: at most about 32 questions.
 */
export const nextAfter = (s: Schedule, t: Date): Date | undefined => {
  const at = t.getTime()
  const first = next(s, at)
  if (first === undefined || first > at) return first === undefined ? undefined : new Date(first)
  let lo = at // asked: answered at or before `at`
  let hi: number | undefined // asked: answered after `at`
  for (let step = 1000; hi === undefined && step <= 2 ** 15 * 1000; step *= 2) {
    const answer = next(s, at + step)
    if (answer === undefined) return undefined
    if (answer > at) hi = at + step
    else lo = at + step
  }
  if (hi === undefined) return undefined
  let after: number = hi
  while (after - lo > 1000) {
    const mid: number = lo + Math.floor((after - lo) / 2)
    const answer = next(s, mid)
    if (answer !== undefined && answer > at) after = mid
    else lo = mid
  }
  const answer = next(s, after)
  return answer === undefined || answer <= at ? undefined : new Date(answer)
}

/**
 * The latest scheduled time at or before `now`, given `due`, a scheduled time at or before it (the
 * schedule's `next_run_at`). Binary search on croner's `nextAfter` between them (a firing exists in
 * (lo, now] while `nextAfter(lo) <= now`), so an every-second schedule down for a year takes about
 * 35 questions, not 31 million. Bounded: at most 64 steps; the answer is always a scheduled time in
 * [due, now].
 */
export const latestAtOrBefore = (s: Schedule, due: Date, now: Date): Date => {
  const end = now.getTime()
  let best = due.getTime() // a scheduled time <= now
  let hi = end // no scheduled time in (hi, now]
  for (let i = 0; i < 64 && hi - best > 1000; i++) {
    const mid = best + Math.floor((hi - best) / 2)
    const found = nextAfter(s, new Date(mid))?.getTime()
    if (found !== undefined && found <= end && found > best) best = found
    else hi = mid
  }
  const last = nextAfter(s, new Date(best))?.getTime()
  return new Date(last !== undefined && last <= end ? last : best)
}
