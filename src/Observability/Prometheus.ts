/**
 * Effect's metric registry (`Metric.snapshot`) in the Prometheus text exposition format 0.0.4:
 * `# HELP` and `# TYPE` once per metric name, then one sample per tag set (counters, gauges;
 * histograms as cumulative `_bucket{le}` with `_sum` and `_count`; summaries as quantiles with
 * `_sum` and `_count`; frequencies as a counter labelled `key`).
 */
import { Effect, Metric, type MetricPair, MetricState } from "effect"

export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

const name = (raw: string) => {
  const cleaned = raw.replace(/[^a-zA-Z0-9_:]/g, "_")
  return /^[a-zA-Z_:]/.test(cleaned) ? cleaned : `_${cleaned}`
}
const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, "\\\"")
const escapeHelp = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

const num = (n: number | bigint) =>
  typeof n === "bigint"
    ? n.toString()
    : Number.isNaN(n)
    ? "NaN"
    : n === Number.POSITIVE_INFINITY
    ? "+Inf"
    : n === Number.NEGATIVE_INFINITY
    ? "-Inf"
    : String(n)

const labels = (pairs: ReadonlyArray<readonly [string, string]>) =>
  pairs.length === 0 ? "" : `{${pairs.map(([k, v]) => `${name(k)}="${escapeLabel(v)}"`).join(",")}}`

interface Family {
  type: "counter" | "gauge" | "histogram" | "summary"
  help: string | undefined
  readonly lines: Array<string>
}

/** The text of a snapshot. */
export const render = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, Family>()
  const family = (metric: string, type: Family["type"], help: string | undefined) => {
    let f = families.get(metric)
    if (f === undefined) {
      f = { type, help, lines: [] }
      families.set(metric, f)
    }
    return f
  }
  for (const { metricKey, metricState } of pairs) {
    const metric = name(metricKey.name)
    const help = metricKey.description._tag === "Some" ? metricKey.description.value : undefined
    const tags = metricKey.tags.map((t) => [t.key, t.value] as const)
    const sample = (suffix: string, extra: ReadonlyArray<readonly [string, string]>, value: number | bigint) =>
      `${metric}${suffix}${labels([...tags, ...extra])} ${num(value)}`
    if (MetricState.isCounterState(metricState)) {
      family(metric, "counter", help).lines.push(sample("", [], metricState.count))
    } else if (MetricState.isGaugeState(metricState)) {
      family(metric, "gauge", help).lines.push(sample("", [], metricState.value))
    } else if (MetricState.isHistogramState(metricState)) {
      const f = family(metric, "histogram", help)
      let infinite = false
      for (const [bound, count] of metricState.buckets) {
        if (bound === Number.POSITIVE_INFINITY) infinite = true
        f.lines.push(sample("_bucket", [["le", num(bound)]], count))
      }
      if (!infinite) f.lines.push(sample("_bucket", [["le", "+Inf"]], metricState.count))
      f.lines.push(sample("_sum", [], metricState.sum), sample("_count", [], metricState.count))
    } else if (MetricState.isSummaryState(metricState)) {
      const f = family(metric, "summary", help)
      for (const [quantile, value] of metricState.quantiles) {
        if (value._tag === "Some") f.lines.push(sample("", [["quantile", num(quantile)]], value.value))
      }
      f.lines.push(sample("_sum", [], metricState.sum), sample("_count", [], metricState.count))
    } else if (MetricState.isFrequencyState(metricState)) {
      const f = family(metric, "counter", help)
      for (const [key, count] of metricState.occurrences) f.lines.push(sample("", [["key", key]], count))
    }
  }
  const out: Array<string> = []
  for (const [metric, f] of [...families].sort(([a], [b]) => a.localeCompare(b))) {
    if (f.help !== undefined) out.push(`# HELP ${metric} ${escapeHelp(f.help)}`)
    out.push(`# TYPE ${metric} ${f.type}`, ...f.lines)
  }
  return out.length === 0 ? "" : out.join("\n") + "\n"
}

/** The process's metrics now, as Prometheus text. */
export const scrape: Effect.Effect<string> = Effect.map(Metric.snapshot, render)
