// Package sqlstore is what coordd's SQL stores share: the logic of every
// primitive whose rules do not depend on the database, written once over a
// small seam, and the SQL of it kept as named, documented Query values.
//
// A SQL store (backends/sqlite, backends/mysql) is a package of its own that
// opens its driver, embeds Core and gives it two things:
//
//   - a Dialect: its flavor of SQL (Standard: ON CONFLICT and RETURNING, as
//     SQLite and PostgreSQL speak it; or MySQL), its clock expression, how
//     it names tables (a prefix, a schema, quoting), how it locks rows it
//     reads in a write transaction, and how its driver reports a duplicate
//     key or a missing table;
//   - a DB: how it runs statements under its own rules: a read snapshot, a
//     write transaction retried after a deadlock (MySQL) or queued behind
//     the one writer of the file (SQLite), a single statement committed by
//     itself, and the schema check that makes a never-migrated store read
//     as empty.
//
// Core then implements the parts of the backend contract that are the same
// everywhere. A store keeps, in its own package, only what truly differs:
// a faster path its database allows (MySQL's leader take in one UPDATE
// without RETURNING), a technique only it has (MySQL's GET_LOCK sessions
// and KILL QUERY wake-ups), or its migrations.
//
// Adding a SQL store: write its migrations (the same tables and columns as
// the others, in its types), a Dialect, a DB over its driver's *sql.DB,
// embed Core, implement what Core does not, and run the conformance suite
// (backends/backendtest) against a real server.
package sqlstore
