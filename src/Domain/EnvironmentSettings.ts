/** Environment settings (D9, D16): what a customer configures per environment. */
import { Schema } from "effect"

import { SingleLine } from "../Kernel/Strings.js"

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

export const Settings = Schema.Struct({
  object: Schema.Literal("settings"),
  identity_provider: Schema.NullOr(IdentityProvider),
  updated_at: Schema.NullOr(Timestamp)
}).annotations({ identifier: "EnvironmentSettings" })

export const UpdateSettings = strictBody(
  Schema.Struct({
    identity_provider: Schema.optional(Schema.NullOr(IdentityProvider))
  }).annotations({ identifier: "UpdateSettings" })
)
