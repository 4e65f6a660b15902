# Build: install everything (npm's `prepare` compiles src/ to dist/ with tsc), then drop the
# development dependencies. Run: compiled JavaScript only, no TypeScript loader.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm install --no-audit --no-fund && npm prune --omit=dev --no-audit --no-fund

FROM node:20-bookworm-slim
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080 DATA_DIR=/data
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8080
# The operator CLI in the container: docker compose exec app node dist/Operator/Cli.js --help
CMD ["node", "dist/main.js"]
