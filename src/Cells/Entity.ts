/**
 * The cell as an `@effect/cluster` entity: type "Cell", keyed by `tenant/environment`
 * (`cellKey`), one RPC per command of the cell protocol with that command's schema as payload and
 * its reply's schema as success. Every message is volatile (not persisted): what must outlive a
 * node is already in Postgres (runs, events, deliveries, schedules), and a volatile message that
 * was in flight when a node died may be delivered again to the cell's new owner, so every command
 * is idempotent (admission spends a token, which a retry spends again: at most one extra).
 */
import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Schema } from "effect"

import { QuotaLimits } from "../Domain/Quotas.js"
import {
  AdmitRequest,
  CancelRun,
  CellStats,
  CloseStream,
  EndRuns,
  GetCellStats,
  GetGeneration,
  GetQuotaLimits,
  OpenStream,
  OpenStreamReply,
  RateLimitReply,
  ReloadQuotaLimits,
  ResumeRuns,
  StartRun
} from "./Protocol.js"

export const CellEntity = Entity.make("Cell", [
  Rpc.make("AdmitRequest", { payload: AdmitRequest, success: RateLimitReply }),
  Rpc.make("GetGeneration", { payload: GetGeneration, success: Schema.Number }),
  Rpc.make("StartRun", { payload: StartRun }),
  Rpc.make("ResumeRuns", { payload: ResumeRuns }),
  Rpc.make("CancelRun", { payload: CancelRun }),
  Rpc.make("EndRuns", { payload: EndRuns }),
  Rpc.make("OpenStream", { payload: OpenStream, success: OpenStreamReply }),
  Rpc.make("CloseStream", { payload: CloseStream }),
  Rpc.make("GetQuotaLimits", { payload: GetQuotaLimits, success: QuotaLimits }),
  Rpc.make("ReloadQuotaLimits", { payload: ReloadQuotaLimits }),
  Rpc.make("GetCellStats", { payload: GetCellStats, success: CellStats })
])
