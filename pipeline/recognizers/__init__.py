"""Speech recognisers behind the :class:`~duplex.pipeline.recognizer.Recognizer` protocol."""
