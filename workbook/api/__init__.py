"""The Messages API as the workbook knows it: the contract from the SDK's types, the wire format,
comparing a request with a recording, and server-held threads."""
