// JSON Schema -> GBNF (grammar.h), for structured output that fails closed: a schema keyword
// whose constraint the grammar cannot enforce is an error naming it (and where it is), never a
// grammar that lets through what the schema forbids. docs/GRAMMAR.md lists what is supported:
// type (and arrays of types), properties, required, additionalProperties, enum, const, items,
// minItems, maxItems, anyOf, oneOf (as anyOf: exclusivity is not enforced), allOf of one schema,
// $ref into #/$defs or #/definitions (recursion allowed), string minLength, maxLength and the
// formats date, time, date-time and uuid, integer and number minimum 0 (and integer minimum 1 or
// exclusiveMinimum 0), and the annotations (title, description, default, examples, ...).
//
// The text produced is compact JSON with bounded optional whitespace between tokens, properties
// in the schema's order (the required ones present, the optional ones may be skipped).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kestrel {

// schema: the schema's JSON text. KESTREL_ERR_INVALID_ARGUMENT for JSON that does not parse or a
// malformed schema, KESTREL_ERR_UNSUPPORTED naming a keyword that cannot be enforced.
Expected<std::string> json_schema_to_gbnf(std::string_view schema);

// For grammars that embed schemas (tool calls): the expression a value of `schema` matches, its
// rules (named prefix1, prefix2, ...) appended to *rules; they use json_primitives_gbnf()'s
// rules (json-ws, json-string, ...), which the caller adds once.
Expected<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix,
                                        std::string* rules);
std::string json_primitives_gbnf();
// A GBNF string literal matching `text` exactly.
std::string gbnf_literal(std::string_view text);

// Any JSON value (response_format {"type": "json_object"} asks for an object: object_only).
std::string json_value_gbnf(bool object_only);

}  // namespace kestrel
