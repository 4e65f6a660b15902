/**
 * The client's type: `HttpApiClient.Client` of the /v1 groups of the one `HttpApi` (the operator
 * plane left out: it takes the operator token), with what the client fills in made optional:
 * `tenant_id` and `environment` in paths and the `Idempotency-Key` header of mutations.
 */
import type { HttpApi, HttpApiEndpoint, HttpApiGroup, HttpClientError, HttpClientResponse } from "@effect/platform"
import type { Effect, ParseResult } from "effect"
import type { Simplify } from "effect/Types"

import type { Api } from "../Api.js"

type ApiGroups = typeof Api extends HttpApi.HttpApi<infer _Id, infer Groups, infer _E, infer _R> ? Groups : never
export type ApiError = typeof Api extends HttpApi.HttpApi<infer _Id, infer _Groups, infer E, infer _R> ? E : never

/** The groups the client has: all but the operator plane. */
export type CustomerGroups = Exclude<ApiGroups, { readonly identifier: "operator" }>

/** Path parameters and headers the client fills in when a call leaves them out. */
type PathDefaults = "tenant_id" | "environment"
type HeaderDefaults = "idempotency-key"

type Loosen<A, K extends PropertyKey> = Simplify<Omit<A, K> & { readonly [P in Extract<keyof A, K>]?: A[P] }>

/** A request field: absent when the endpoint has none, optional when all of it is. */
type Field<Name extends string, A> = [A] extends [never] ? {}
  : {} extends A ? { readonly [N in Name]?: A }
  : { readonly [N in Name]: A }

export type Request<Path, UrlParams, Payload, Headers, WithResponse extends boolean> = Simplify<
  & ([Path] extends [void] ? {} : Field<"path", Loosen<Path, PathDefaults>>)
  & Field<"urlParams", UrlParams>
  & ([Headers] extends [never] ? {} : Field<"headers", Loosen<Headers, HeaderDefaults>>)
  & ([Payload] extends [never] ? {} : { readonly payload: Payload })
  & { readonly withResponse?: WithResponse }
>

type Result<WithResponse extends boolean, Success, Error> = Effect.Effect<
  WithResponse extends true ? [Success, HttpClientResponse.HttpClientResponse] : Success,
  Error | ApiError | HttpClientError.HttpClientError | ParseResult.ParseError
>

/** One operation; the request may be left out when nothing in it is required. */
export type Method<Endpoint, GroupError> = [Endpoint] extends [
  HttpApiEndpoint.HttpApiEndpoint<
    infer _Name,
    infer _Method,
    infer Path,
    infer UrlParams,
    infer Payload,
    infer Headers,
    infer Success,
    infer Error,
    infer _R,
    infer _RE
  >
] ? {} extends Request<Path, UrlParams, Payload, Headers, false> ? <WithResponse extends boolean = false>(
      request?: Request<Path, UrlParams, Payload, Headers, WithResponse>
    ) => Result<WithResponse, Success, Error | GroupError>
  : <WithResponse extends boolean = false>(
    request: Request<Path, UrlParams, Payload, Headers, WithResponse>
  ) => Result<WithResponse, Success, Error | GroupError>
  : never

/** The operations, grouped like the `HttpApi` (`client.users.createUser(...)`). */
export type Groups = {
  readonly [Group in CustomerGroups as HttpApiGroup.HttpApiGroup.Name<Group>]: Group extends
    HttpApiGroup.HttpApiGroup<infer _Name, infer Endpoints, infer GroupError, infer _R, infer _TopLevel> ? {
      readonly [Endpoint in Endpoints as HttpApiEndpoint.HttpApiEndpoint.Name<Endpoint>]: Method<Endpoint, GroupError>
    }
    : never
}
