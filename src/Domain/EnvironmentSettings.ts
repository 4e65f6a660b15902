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

const AuditRetentionDays = Schema.Int.pipe(Schema.between(1, 3650, { message: () => "must be an integer from 1 to 3650" }))
  .annotations({ description: `Days audit entries are kept, 1 to 3650 (default ${DEFAULT_AUDIT_RETENTION_DAYS})` })

const DefaultModelProfileId = Schema.NullOr(RefString).annotations({
  description: "The model profile a revision created without `model_profile_id` uses; a profile of this environment, or null"
})

export const Settings = Schema.Struct({
  object: Schema.Literal("settings"),
  identity_provider: Schema.NullOr(IdentityProvider),
  default_model_profile_id: DefaultModelProfileId,
  audit_retention_days: AuditRetentionDays,
  updated_at: Schema.NullOr(Timestamp)
}).annotations({ identifier: "EnvironmentSettings" })

export const UpdateSettings = strictBody(
  Schema.Struct({
    identity_provider: Schema.optional(Schema.NullOr(IdentityProvider)),
    default_model_profile_id: Schema.optional(DefaultModelProfileId),
    audit_retention_days: Schema.optional(AuditRetentionDays)
  }).annotations({ identifier: "UpdateSettings" })
)
export type UpdateSettings = typeof UpdateSettings.Type
