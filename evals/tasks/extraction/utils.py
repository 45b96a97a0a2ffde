import json

from evals import extraction_scoring, item_errors


def needs_data_files(**kwargs):
    raise ValueError("task extraction has no data of its own: name a JSONL of {text, gold, schema} in the "
                     "recipe (tasks: [{name: extraction, data_files: my_items.jsonl}])")


def doc_to_text(doc):
    return extraction_scoring.prompt_of(doc)


def doc_to_target(doc):
    return json.dumps(extraction_scoring.gold_of(doc))


def scores(doc, results):
    scores = extraction_scoring.score(doc, results[0])
    scores.setdefault("schema_valid", scores["json_valid"])  # no schema: any JSON object conforms
    return scores


process_results = item_errors.guarded(scores, ("field_f1", "json_valid", "exact_match", "schema_valid"))
