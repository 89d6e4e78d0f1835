"""``python -m deform_onnx``: the ``deform-onnx`` command line (:func:`deform_onnx.cli.main`)."""

from deform_onnx.cli import main

if __name__ == "__main__":
    main()
