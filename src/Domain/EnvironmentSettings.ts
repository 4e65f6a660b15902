/** Environment settings (D9, D16): what a customer configures per environment. */
import { Schema } from "effect"

import { RefString, SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"

const Jwks = Schema.Struct({ keys: Schema.Array(Schema.Record({ key: Schema.String, value: Schema.Unknown })) })

export const IdentityProvider = Schema.Struct({
  issuer: SingleLine.pipe(Schema.minLength(1), Schema.maxLength(2000)),
  audience: SingleLine.pipe(Schema.minLength(1), Schema.maxLength(2000)),
  jwks: Schema.optional(Jwks).annotations({ description: "The provider's public keys, inline" }),
  jwks_url: Schema.optional(SingleLine.pipe(Schema.maxLength(2000)).annotations({ jsonSchema: { format: "uri" } })).annotations({
    description: "Or where to fetch them (HTTPS; the destination checks of connections apply)"
  })
}).annotations({
  identifier: "IdentityProvider",
  description: "Exactly one of `jwks` and `jwks_url`",
  // the rule the settings service enforces (400 parameter_invalid), stated in the document
  // (inside `allOf`: a top-level `oneOf` annotation would replace the generated schema)
  jsonSchema: { allOf: [{ oneOf: [{ required: ["jwks"] }, { required: ["jwks_url"] }] }] }
})
export type IdentityProvider = typeof IdentityProvider.Type

/** How long audit entries are kept when an environment has not chosen (the contract's 90-day metadata retention). */
export const DEFAULT_AUDIT_RETENTION_DAYS = 90

/** The shortest audit retention that can be set (D20: operators set 7..3650; a key may only raise it). */
export const MIN_AUDIT_RETENTION_DAYS = 7

/** How often a schedule may fire at most when the operator has not chosen (D20). */
export const DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS = 60

/** What is shown: values below 7 were settable before D20 and are shown as stored. */
const AuditRetentionShown = Schema.Int.pipe(Schema.between(1, 3650)).annotations({
  description: `Days audit entries are kept (default ${DEFAULT_AUDIT_RETENTION_DAYS}). A key may raise it, never lower it; ` +
    "the operator sets any value from 7 to 3650"
})

const AuditRetentionDays = Schema.Int.pipe(
  Schema.between(MIN_AUDIT_RETENTION_DAYS, 3650, { message: () => "must be an integer from 7 to 3650" })
)

const ScheduleMinIntervalSeconds = Schema.Int.pipe(
  Schema.between(1, 3600, { message: () => "must be an integer from 1 to 3600" })
)

const DefaultModelProfileId = Schema.NullOr(RefString).annotations({
  description: "The model profile a revision created without `model_profile_id` uses; a profile of this environment, or null"
})

export const Settings = Schema.Struct({
  object: Schema.Literal("settings"),
  identity_provider: Schema.NullOr(IdentityProvider),
  default_model_profile_id: DefaultModelProfileId,
  audit_retention_days: AuditRetentionShown,
  schedule_min_interval_seconds: ScheduleMinIntervalSeconds.annotations({
    description: `Read-only: the operator sets it, 1 to 3600 (default ${DEFAULT_SCHEDULE_MIN_INTERVAL_SECONDS}). A schedule's ` +
      "cron may not fire more often than once in this many seconds (400 `parameter_invalid`, param `cron`)"
  }),
  updated_at: Schema.NullOr(Timestamp)
}).annotations({ identifier: "EnvironmentSettings" })
export type Settings = typeof Settings.Type

export const UpdateSettings = strictBody(
  Schema.Struct({
    identity_provider: Schema.optional(Schema.NullOr(IdentityProvider)),
    default_model_profile_id: Schema.optional(DefaultModelProfileId),
    audit_retention_days: Schema.optional(AuditRetentionDays.annotations({
      description: "Days audit entries are kept, 7 to 3650, and not below the current value: a key may raise it, never " +
        "lower it (403 `retention_lowering_forbidden`)"
    }))
  }).annotations({ identifier: "UpdateSettings" })
)
export type UpdateSettings = typeof UpdateSettings.Type

/** The operator's change (D20): the limits a key cannot lower or set; the fields given change. */
export const OperatorUpdateSettings = strictBody(
  Schema.Struct({
    audit_retention_days: Schema.optional(AuditRetentionDays),
    schedule_min_interval_seconds: Schema.optional(ScheduleMinIntervalSeconds)
  }).annotations({ identifier: "OperatorUpdateSettings" })
)
export type OperatorUpdateSettings = typeof OperatorUpdateSettings.Type
