// Records written by Powertools for AWS Lambda (TypeScript) itself under each
// key expression the cut-over tests read (tests/tests/it/powertools_writers.rs),
// the twin of ../write_expressions.py (same cases, same events, same output).
//
//   POWERTOOLS_NODE_MODULES=... AWS_ENDPOINT_URL_DYNAMODB=... node write_expressions.mjs TABLE
//
// POWERTOOLS_NODE_MODULES (or `powertools_node_modules`, which
// scripts/powertools-node.sh exports) is the node_modules folder holding
// package-lock.json's packages: ESM ignores NODE_PATH, so this script loads
// them from there by path.
//
// Creates TABLE in Powertools' default layout (partition key `id`), then, as a
// function named `orders-api` would, runs Powertools' own makeIdempotent once
// per case (the record COMPLETED; md5, 3600 s expiry, the key prefix
// `orders-api.<case>`, one persistence layer per case, as each case has its
// own configuration):
//
// - `header`, `body`, `json_field` (its body's amount validated),
//   `json_fields` and `tenant_header`: the API handler on one API Gateway HTTP
//   API (payload 2.0) event each, key from the expression named in HTTP_CASES;
// - `sqs`: an idempotent function of one SQS record (key `messageId`);
// - `running`: the header expression, left in progress (the persistence
//   layer's own saveInProgress, with 60 s left).
//
// Every case's event has its own `idempotency-key` header and order id, so no
// two cases share a record. Reads every record back and prints, as JSON:
// {"runtime": "typescript", "version": ..., "cases": {CASE: {"prefix",
// "expression", "validation", "event", "id"}}, "expiration": <the header
// record's expiration>}.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

process.env.AWS_LAMBDA_FUNCTION_NAME = 'orders-api';
const region = process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || 'us-east-1';
process.env.AWS_REGION = region;

const fail = (message) => {
  console.error(`write_expressions.mjs: ${message}`);
  process.exit(1);
};
const modules = process.env.POWERTOOLS_NODE_MODULES || process.env.powertools_node_modules;
if (!modules) {
  fail('POWERTOOLS_NODE_MODULES is not set (source scripts/powertools-node.sh, which installs the packages)');
}
if (!process.env.AWS_ENDPOINT_URL_DYNAMODB) {
  fail('AWS_ENDPOINT_URL_DYNAMODB is not set (run under scripts/dynamodb-local.sh)');
}
const table = process.argv[2];
if (!table) fail('usage: write_expressions.mjs TABLE');

const idempotencyDir = join(modules, '@aws-lambda-powertools/idempotency');
const load = (path) => import(pathToFileURL(join(idempotencyDir, path)).href);
const { makeIdempotent, IdempotencyConfig } = await load('lib/esm/index.js');
const { DynamoDBPersistenceLayer } = await load('lib/esm/persistence/DynamoDBPersistenceLayer.js');
const version = JSON.parse(readFileSync(join(idempotencyDir, 'package.json'), 'utf8')).version;
// The AWS SDK has no ESM entry point of its own (no `exports`): Powertools'
// ESM imports of it load its CommonJS build, the module required here.
const require = createRequire(join(modules, 'write_expressions.cjs'));
const { DynamoDBClient, CreateTableCommand, ScanCommand } = require('@aws-sdk/client-dynamodb');

const BY = 'powertools-typescript';

// Case: [eventKeyJmesPath, payloadValidationJmesPath].
const HTTP_CASES = {
  header: ['headers."idempotency-key"', null],
  body: ['body', null],
  json_field: ['powertools_json(body).order_id', 'powertools_json(body).amount'],
  json_fields: ['powertools_json(body).[customer_id, order_id]', null],
  tenant_header: ['[requestContext.authorizer.jwt.claims.sub, headers."idempotency-key"]', null],
};
const SQS_EXPRESSION = 'messageId';
const RUNNING_EXPRESSION = 'headers."idempotency-key"';
// The header's value in each case: `h-<case>`, but for the two the tests name.
const KEYS = { header: 'h-1', running: 'running-1' };

const context = {
  callbackWaitsForEmptyEventLoop: true,
  functionName: 'orders-api',
  functionVersion: '$LATEST',
  invokedFunctionArn: 'arn:aws:lambda:us-east-1:123456789012:function:orders-api',
  memoryLimitInMB: '128',
  awsRequestId: '00000000-0000-4000-8000-000000000000',
  logGroupName: '/aws/lambda/orders-api',
  logStreamName: '2025/03/12/[$LATEST]0123456789abcdef0123456789abcdef',
  getRemainingTimeInMillis: () => 60_000,
  done: () => {},
  fail: () => {},
  succeed: () => {},
};

/** A full API Gateway HTTP API (payload 2.0) POST /orders event. */
const httpEvent = (name) => {
  const body = JSON.stringify({ order_id: `o-${name}`, customer_id: 'c-1', amount: 2500 });
  return {
    version: '2.0',
    routeKey: 'POST /orders',
    rawPath: '/orders',
    rawQueryString: '',
    headers: {
      accept: '*/*',
      'content-length': String(body.length),
      'content-type': 'application/json',
      host: 'abc123def4.execute-api.us-east-1.amazonaws.com',
      'idempotency-key': KEYS[name] ?? `h-${name}`,
      'user-agent': 'curl/8.5.0',
      'x-amzn-trace-id': 'Root=1-67d1dc5e-0a1b2c3d4e5f6a7b8c9d0e1f',
      'x-forwarded-for': '203.0.113.7',
      'x-forwarded-port': '443',
      'x-forwarded-proto': 'https',
    },
    requestContext: {
      accountId: '123456789012',
      apiId: 'abc123def4',
      authorizer: { jwt: { claims: { sub: 'tenant-a' }, scopes: null } },
      domainName: 'abc123def4.execute-api.us-east-1.amazonaws.com',
      domainPrefix: 'abc123def4',
      http: {
        method: 'POST',
        path: '/orders',
        protocol: 'HTTP/1.1',
        sourceIp: '203.0.113.7',
        userAgent: 'curl/8.5.0',
      },
      requestId: `H1aBcD${name}=`,
      routeKey: 'POST /orders',
      stage: '$default',
      time: '12/Mar/2025:19:03:58 +0000',
      timeEpoch: 1741806238000,
    },
    body,
    isBase64Encoded: false,
  };
};

/** A full SQS record as an SQS event source mapping delivers it. */
const sqsRecord = () => ({
  messageId: 'm-1',
  receiptHandle:
    'AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a+ZzYQn0NAJkB5ONqJBBYk5d9EmrWaPNtTq6Xc8WWLdp1TUq0F3jz5m/J4bH0y8JcQW==',
  body: '{"order_id":"o-sqs"}',
  attributes: {
    ApproximateReceiveCount: '1',
    SentTimestamp: '1741806238000',
    SenderId: 'AIDAIENQZJOLO23YVJ4VO',
    ApproximateFirstReceiveTimestamp: '1741806238012',
  },
  messageAttributes: {},
  md5OfBody: 'de4023976cea46937918de995f5f1698',
  eventSource: 'aws:sqs',
  eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:orders-queue',
  awsRegion: 'us-east-1',
});

const response = (name) => ({
  statusCode: 201,
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ by: BY, case: name }),
});

const assert = (ok, message) => {
  if (!ok) fail(`assertion failed: ${message}`);
};

const client = new DynamoDBClient({ region, endpoint: process.env.AWS_ENDPOINT_URL_DYNAMODB });
await client.send(
  new CreateTableCommand({
    TableName: table,
    AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
    KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
    BillingMode: 'PAY_PER_REQUEST',
  })
);

const cases = {};
const layers = {};
const layerFor = (name) => {
  layers[name] = new DynamoDBPersistenceLayer({ tableName: table, awsSdkV3Client: client });
  return layers[name];
};

for (const [name, [expression, validation]] of Object.entries(HTTP_CASES)) {
  const config = new IdempotencyConfig({
    eventKeyJmesPath: expression,
    ...(validation ? { payloadValidationJmesPath: validation } : {}),
    expiresAfterSeconds: 3600,
  });
  const prefix = `orders-api.${name}`;
  const handler = makeIdempotent(async (_event, _context) => response(name), {
    persistenceStore: layerFor(name),
    config,
    keyPrefix: prefix,
  });
  const event = httpEvent(name);
  const answer = await handler(event, context);
  assert(JSON.stringify(answer) === JSON.stringify(response(name)), `${name}: ${JSON.stringify(answer)}`);
  cases[name] = { prefix, expression, validation, event };
}

const sqsConfig = new IdempotencyConfig({ eventKeyJmesPath: SQS_EXPRESSION, expiresAfterSeconds: 3600 });
sqsConfig.registerLambdaContext(context);
const processRecord = makeIdempotent(async (_record) => ({ by: BY, case: 'sqs' }), {
  persistenceStore: layerFor('sqs'),
  config: sqsConfig,
  keyPrefix: 'orders-api.sqs',
  dataIndexArgument: 0,
});
const record = sqsRecord();
const processed = await processRecord(record);
assert(processed.by === BY && processed.case === 'sqs', `sqs: ${JSON.stringify(processed)}`);
cases.sqs = { prefix: 'orders-api.sqs', expression: SQS_EXPRESSION, validation: null, event: record };

const runningConfig = new IdempotencyConfig({ eventKeyJmesPath: RUNNING_EXPRESSION, expiresAfterSeconds: 3600 });
const runningLayer = layerFor('running');
runningLayer.configure({ config: runningConfig, keyPrefix: 'orders-api.running' });
const runningEvent = httpEvent('running');
await runningLayer.saveInProgress(runningEvent, 60_000);
cases.running = {
  prefix: 'orders-api.running',
  expression: RUNNING_EXPRESSION,
  validation: null,
  event: runningEvent,
};

// Every record, as the table holds it: one per case, found by its prefix.
const { Items: items } = await client.send(new ScanCommand({ TableName: table, ConsistentRead: true }));
assert(items.length === Object.keys(cases).length, `${items.length} records: ${JSON.stringify(items)}`);
let expiration = null;
for (const [name, entry] of Object.entries(cases)) {
  const found = items.filter((item) => item.id.S.startsWith(`${entry.prefix}#`));
  assert(found.length === 1, `${name}: ${JSON.stringify(found)}`);
  const [item] = found;
  const id = item.id.S;
  // The id Powertools computes for the event is the one it wrote.
  const computed = layers[name].getHashedIdempotencyKey(entry.event);
  assert(id === computed, `${name}: ${id} written, ${computed} computed`);
  const status = item.status.S;
  assert(status === (name === 'running' ? 'INPROGRESS' : 'COMPLETED'), `${name}: ${JSON.stringify(item)}`);
  entry.id = id;
  if (name === 'header') expiration = Number(item.expiration.N);
}
console.log(JSON.stringify({ runtime: 'typescript', version, cases, expiration }));
client.destroy();
