"""`bertkit predict --model RUN --input FILE|-`: answer new inputs with a fine-tuned run (or an ONNX export).

What the input and output look like is the run's task's: `bertkit predict --model RUN --help` lists its flags.
Sequence classification reads text lines (a pair model's: the two texts split by a tab) or a table and writes
{text, label, score}; token classification reads text lines or CoNLL and writes tags and entities (or CoNLL);
question answering reads JSONL {question, context} or a SQuAD JSON file and writes answers (or the official
scorer's {id: answer}); multiple choice reads SWAG's CSV or JSONL {context, endings}. The output is JSONL (one line
per input) unless the task offers another format.

The input is read and checked whole first (a bad row stops the command before the model loads and before anything
is written), then answered and written in slices of 4,096 rows (`Task.predict_slices`): memory holds a slice's
features and answers, not the input's. Standard output gets each slice as it is answered; `--output FILE` appears,
whole, when the command ends.
"""

from __future__ import annotations

import argparse

from .common import add_inference_flags, model_task, task_flags

EXAMPLE = """example:
  echo "a gripping, funny film" | bertkit predict --model runs/sst2 --input -
  bertkit predict --model runs/sst2 --input dev.tsv --output dev_predictions.jsonl --probs
  echo "EU rejects German call" | bertkit predict --model runs/conll2003 --input -   # NER: tags, entities
  bertkit predict --model runs/conll2003 --input test.txt --input-format conll --output-format conll  # token gold pred
  echo '{"question": "Who won?", "context": "The Broncos won."}' | bertkit predict --model runs/squad --input -
  bertkit predict --model runs/squad --input dev-v1.1.json --output-format squad --output predictions.json
  echo '{"context": "A man sits at a piano.", "endings": ["He plays.", "He eats it."]}' \\
    | bertkit predict --model runs/swag --input -
  bertkit predict --model runs/sst2 --help                      # the flags of the run's task
"""


def run(args: argparse.Namespace) -> int:
    import sys

    from .common import load_for_inference, open_output, output_file, quiet_libraries

    output_file(args.output, args.input)
    if not args.verbose:
        quiet_libraries()
    task_class = args.task_class
    rows = task_class.read_inputs(args.input, args)  # read and checked before the model is loaded
    task, precision = load_for_inference(args)
    options = task_class.predict_options(args)
    answered = ((part, task.predict_rows(part, args.batch_size, precision, **options))
                for part in task.predict_slices(rows))  # a slice at a time, as the output takes them
    with open_output(args.output) as out:
        if task.output_whole(rows, args):
            out.write(task.format_rows(rows, [a for _, answers in answered for a in answers], args))
        else:
            for part, answers in answered:
                out.write(task.format_rows(part, answers, args))
                out.flush()  # a reader of standard output gets each slice as it is answered
    if args.output:
        print(f"wrote {len(rows)} predictions to {args.output}", file=sys.stderr)
    return 0


def register(subparsers, argv: list[str] | None = None) -> None:
    p = subparsers.add_parser("predict", help="answer new inputs with a fine-tuned run", epilog=EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              description=__doc__.split("\n\n", 1)[1].split("\n\n")[0])
    add_inference_flags(p)
    p.add_argument("--input", required=True, help="input file, or - for standard input")
    p.add_argument("--output", help="output file (default: standard output)")
    p.add_argument("--verbose", action="store_true", help="keep the libraries' progress bars and loading messages")
    task, error = model_task(argv)
    if task is not None:
        error = task_flags(p, task, lambda: task.add_predict_flags(p.add_argument_group(f"{task.name} inputs and "
                                                                                         "outputs")))
    p.set_defaults(func=run, task_class=task, task_error=error)
