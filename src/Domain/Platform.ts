/** Resources of the platform plane (contract part 4; fields "not shown" there are designed here). */
import { Schema } from "effect"

import { SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { EnvironmentName, Timestamp } from "../Kernel/Ids.js"
import { Scope } from "../Kernel/Scopes.js"

const Nullable = <A, I>(s: Schema.Schema<A, I>) => Schema.NullOr(s)

export const Tenant = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("tenant"),
  name: Schema.String,
  status: Schema.Literal("active", "deleting", "deleted"),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "Tenant" })
export type Tenant = typeof Tenant.Type

export const UpdateTenant = strictBody(
  Schema.Struct({
    name: SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200))
  }).annotations({ identifier: "UpdateTenant" })
)

export const EnvironmentState = Schema.Literal("provisioning", "ready", "suspended", "deleting", "deleted")

export const Environment = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("environment"),
  tenant_id: Schema.String,
  name: EnvironmentName,
  state: EnvironmentState,
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "Environment" })
export type Environment = typeof Environment.Type

export const ApiKey = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("api_key"),
  tenant_id: Schema.String,
  environment: EnvironmentName,
  name: Schema.String,
  kind: Schema.Literal("quickstart", "console", "derived").annotations({
    description: "quickstart: the first key (D1); console: made by an operator with explicit scopes; derived: a lease of another key"
  }),
  prefix: Schema.String.annotations({ description: "The first characters of the secret, for recognising a key" }),
  scopes: Schema.Array(Scope),
  status: Schema.Literal("active", "revoked", "expired").annotations({
    description: "active: it authenticates; revoked: revoked (or its user, environment or tenant deleted); expired: " +
      "its `expires_at` passed (a rotated key, after its grace): requests with it are 401 `key_expired`"
  }),
  parent_key_id: Nullable(Schema.String),
  service_actor_id: Nullable(Schema.String).annotations({
    description: "The service actor the key acts as: for the first key, the quickstart's stable service actor"
  }),
  created_at: Timestamp,
  revoked_at: Nullable(Timestamp),
  expires_at: Nullable(Timestamp).annotations({
    description: "When the key stops working: set when it is rotated (the end of its grace), or when the key it derives " +
      "from is; null: no expiry"
  }),
  rotated_from: Nullable(Schema.String).annotations({
    description: "The key this one replaced, when a rotation made it"
  })
}).annotations({ identifier: "ApiKey" })
export type ApiKey = typeof ApiKey.Type

/** An ApiKey as created: the only time `secret` is shown. An idempotent replay shows it as null. */
export const CreatedApiKey = Schema.Struct({
  ...ApiKey.fields,
  secret: Nullable(Schema.String).annotations({
    description: "The key secret, shown once; null in an idempotent replay"
  })
}).annotations({ identifier: "CreatedApiKey" })
export type CreatedApiKey = typeof CreatedApiKey.Type

/** How long a rotated key keeps working (D17): 0..86,400 seconds, 3,600 by default. */
export const ROTATION_GRACE = { default: 3600, max: 86_400 } as const

export const RotateApiKey = strictBody(
  Schema.Struct({
    grace_seconds: Schema.optional(
      Schema.Int.pipe(Schema.between(0, ROTATION_GRACE.max)).annotations({
        description: "How long the rotated key keeps working, in seconds (0: it expires at once)",
        default: ROTATION_GRACE.default
      })
    )
  }).annotations({ identifier: "RotateApiKey" })
)

export const User = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("user"),
  external_id: Schema.String,
  display_name: Schema.String,
  email: Nullable(Schema.String),
  status: Schema.Literal("active"),
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "User" })
export type User = typeof User.Type

export const Email = SingleLine.pipe(
  Schema.maxLength(254),
  Schema.pattern(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, { message: () => "must be an email address" })
)
const DisplayName = SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200))

export const CreateUser = strictBody(
  Schema.Struct({
    external_id: SingleLine.pipe(Schema.minLength(1), Schema.maxLength(255)).annotations({
      description: "Your own identifier for this user; unique within the environment"
    }),
    display_name: DisplayName,
    email: Schema.optional(Nullable(Email))
  }).annotations({ identifier: "CreateUser" })
)

export const UpdateActor = strictBody(
  Schema.Struct({
    display_name: Schema.optional(DisplayName),
    email: Schema.optional(Nullable(Email))
  }).annotations({
    identifier: "UpdateActor",
    description: "At least one field",
    // the rule the handler enforces (400 parameter_missing), stated in the document
    jsonSchema: { minProperties: 1 }
  })
)

export const ServiceActor = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("service_actor"),
  name: Schema.String,
  created_at: Timestamp,
  updated_at: Timestamp
}).annotations({ identifier: "ServiceActor" })
export type ServiceActor = typeof ServiceActor.Type

export const CreateServiceActor = strictBody(
  Schema.Struct({
    name: SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200))
  }).annotations({ identifier: "CreateServiceActor" })
)

export const DeletionJob = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("deletion_job"),
  resource_type: Schema.Literal("tenant", "environment", "user"),
  resource_id: Schema.String,
  state: Schema.Literal("queued", "running", "succeeded", "failed"),
  created_at: Timestamp,
  purge_after: Timestamp.annotations({ description: "Live data is purged at or soon after this time (within 24 h)" }),
  started_at: Nullable(Timestamp),
  completed_at: Nullable(Timestamp),
  error: Nullable(Schema.String)
}).annotations({ identifier: "DeletionJob" })
export type DeletionJob = typeof DeletionJob.Type
