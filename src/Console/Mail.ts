/**
 * The console's mail (issue 38): through `nodemailer` to `SMTP_URL` when it is set; without it
 * (the embedded default), each message is written to `DATA_DIR/outbox/` (one `.eml` file, mode
 * 0600: it holds a sign-in link) and its path logged, so `npm start` alone completes a sign-up.
 */
import { Effect, Option, Redacted } from "effect"
import * as fs from "node:fs/promises"
import * as path from "node:path"
import nodemailer from "nodemailer"

import { AppConfig } from "../Config/AppConfig.js"
import { makeId } from "../Kernel/Ids.js"

export interface Message {
  readonly to: string
  readonly subject: string
  readonly text: string
}

export class Mailer extends Effect.Service<Mailer>()("Mailer", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const from = config.console.mailFrom
    const transport = Option.map(config.console.smtpUrl, (url) => nodemailer.createTransport(Redacted.value(url)))

    const toOutbox = (message: Message) =>
      Effect.gen(function*() {
        const dir = path.resolve(config.dataDir, "outbox")
        const file = path.join(dir, `${yield* makeId("mail")}.eml`)
        const body = `From: ${from}\nTo: ${message.to}\nSubject: ${message.subject}\n\n${message.text}\n`
        yield* Effect.promise(async () => {
          await fs.mkdir(dir, { recursive: true, mode: 0o700 })
          await fs.writeFile(file, body, { mode: 0o600 })
        })
        yield* Effect.logInfo("console mail written to the outbox (SMTP_URL is not set)").pipe(Effect.annotateLogs("path", file))
      })

    /** Sends (or writes) the message; a failure to send is a defect the page shows as a 500. */
    const send = (message: Message) =>
      Option.match(transport, {
        onNone: () => toOutbox(message),
        onSome: (t) =>
          Effect.promise(() => t.sendMail({ from, to: message.to, subject: message.subject, text: message.text })).pipe(Effect.asVoid)
      }).pipe(Effect.withSpan("Mailer.send"))

    return { send } as const
  })
}) {}
