"""The sans-I/O realtime core: protocol, wire, settings, conversation, session, replies, listening, pacing.

Nothing here awaits or touches a socket; time and input come in as arguments.
"""
