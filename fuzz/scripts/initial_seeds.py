#!/usr/bin/env python3
"""Writes the hand-made starting corpus of each fuzz target into fuzz/corpus/<target>/.

The fuzzer grows the corpus from these; `cargo fuzz cmin` then keeps a minimal covering set,
which is what fuzz/seeds/<target>/ holds (see fuzz/README.md). Each input follows the layout
its check documents in fuzz/src/checks/<target>.rs.
"""
import hashlib
import os
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def write(target, data):
    directory = os.path.join(ROOT, target)
    os.makedirs(directory, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(directory, name), "wb") as file:
        file.write(data)


def http_parser():
    streams = [
        b"GET /devstoreaccount1/q/messages?numofmessages=32 HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"POST /a/q/messages HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello",
        b"PUT /q HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n",
        b"\r\nGET /q HTTP/1.0\nConnection: keep-alive\n\nGET / HTTP/1.1\r\n\r\n",
        b"POST /q HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\nabcDELETE /q HTTP/1.1\r\nConnection: close\r\n\r\n",
    ]
    for stream in streams:
        write("http_parser", b"\x01\x00" + stream)
        write("http_parser", b"\x01\x03" + struct.pack("<HHH", 3, 17, 40) + stream)
        write("http_parser", b"\x00" + bytes([40, 3, 10]) + b"\x02" + struct.pack("<HH", 5, 30) + stream)


def xml_message():
    bodies = [
        b"<QueueMessage><MessageText>hello</MessageText></QueueMessage>",
        b"<?xml version='1.0' encoding='utf-8'?>\n<QueueMessage>\n <MessageText>a&amp;b&#xD;&#x1F600;</MessageText>\n</QueueMessage>",
        b"<QueueMessage><MessageText><![CDATA[<raw>]]></MessageText></QueueMessage>",
        b"<QueueMessage><MessageText/></QueueMessage>",
        b"<QueueMessage><!-- c --><MessageText>x</MessageText><?pi x?></QueueMessage>",
    ]
    for body in bodies:
        write("xml_message", body)


def settings_xml():
    # The first byte picks the reader: even is Set Queue ACL, odd Set Service Properties.
    acls = [
        b"<?xml version='1.0' encoding='utf-8'?>\n<SignedIdentifiers><SignedIdentifier><Id>pol1</Id>"
        b"<AccessPolicy><Start>2026-11-22T00:17:36Z</Start><Expiry>2026-11-23T00:17:36.1234567Z</Expiry>"
        b"<Permission>rp</Permission></AccessPolicy></SignedIdentifier><SignedIdentifier><Id>pol2</Id>"
        b"<AccessPolicy><Permission>a</Permission></AccessPolicy></SignedIdentifier></SignedIdentifiers>",
        b"<SignedIdentifiers><SignedIdentifier><Id>a&amp;b&#xD;&#x1F600;</Id></SignedIdentifier>"
        b"<SignedIdentifier><Id><![CDATA[<c>]]></Id><AccessPolicy/></SignedIdentifier></SignedIdentifiers>",
        b"<SignedIdentifiers />",
        b"  ",
    ]
    for body in acls:
        write("settings_xml", b"\x00" + body)
    properties = [
        b"<?xml version='1.0' encoding='utf-8'?>\n<StorageServiceProperties><Logging><Version>1.0</Version>"
        b"<Delete>false</Delete><Read>true</Read><Write>1</Write><RetentionPolicy><Enabled>true</Enabled>"
        b"<Days>5</Days></RetentionPolicy></Logging><HourMetrics><Version>1.0</Version><Enabled>true</Enabled>"
        b"<IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>7</Days>"
        b"</RetentionPolicy></HourMetrics><MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled>"
        b"<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors><CorsRule>"
        b"<AllowedOrigins>https://a.example,https://b.example</AllowedOrigins><AllowedMethods>GET,PUT"
        b"</AllowedMethods><AllowedHeaders>x-ms-meta-*</AllowedHeaders><ExposedHeaders>x-ms-*"
        b"</ExposedHeaders><MaxAgeInSeconds>500</MaxAgeInSeconds></CorsRule><CorsRule><AllowedOrigins>*"
        b"</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders /><ExposedHeaders />"
        b"<MaxAgeInSeconds>0</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>",
        b"<StorageServiceProperties><Cors/></StorageServiceProperties>",
        b"<StorageServiceProperties><MinuteMetrics><Version> 1.0 </Version><Enabled>0</Enabled>"
        b"<Unknown>x</Unknown><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics>"
        b"</StorageServiceProperties>",
    ]
    for body in properties:
        write("settings_xml", b"\x01" + body)


def router():
    cases = [
        (0, 1, b"127.0.0.1:10001", b"/devstoreaccount1", b"comp=list&maxresults=2&include=metadata", b"", b""),
        (2, 1, b"localhost", b"/devstoreaccount1/myqueue", b"", b"x-ms-meta-Key:value\nx-ms-meta-b:2", b""),
        (3, 1, b"localhost", b"/devstoreaccount1/myqueue/messages", b"visibilitytimeout=5&messagettl=60",
         b"x-ms-version:2026-10-06", b"<QueueMessage><MessageText>hi</MessageText></QueueMessage>"),
        (0, 1, b"localhost", b"/devstoreaccount1/myqueue/messages", b"numofmessages=32&visibilitytimeout=30", b"", b""),
        (0, 1, b"localhost", b"/devstoreaccount1/myqueue/messages", b"peekonly=true&numofmessages=2", b"", b""),
        (2, 1, b"localhost", b"/devstoreaccount1/myqueue/messages/01234567-89ab-cdef-fedc-ba9876543210",
         b"popreceipt=AQAAAAIAAAADAAAA&visibilitytimeout=0", b"", b""),
        (4, 1, b"localhost", b"/devstoreaccount1/myqueue/messages/01234567-89ab-cdef-fedc-ba9876543210",
         b"popreceipt=AQAAAAIAAAADAAAA", b"", b""),
        (0, 3, b"devstoreaccount1.queue.localhost:10001", b"/myqueue", b"comp=metadata", b"", b""),
        (5, 1, b"localhost", b"/devstoreaccount1-secondary/myqueue", b"", b"Origin:http://a", b""),
        (2, 1, b"localhost", b"/devstoreaccount1/?restype=service&comp=properties", b"", b"", b""),
    ]
    for method, flags, host, path, query, headers, body in cases:
        write("router", bytes([method, flags]) + b"\0".join([host, path, query, headers, body]))


def auth():
    now = struct.pack("<Q", 1_795_305_600_000 + 3_600_000)
    account_sas = b"sv=2026-10-06\nss=q\nsrt=sco\nsp=rwdlacup\nst=2026-11-22T00:00:00Z\nse=2026-11-23T00:00:00Z"
    service_sas = b"sv=2026-10-06\nsp=raup\nst=2026-11-22T00:00Z\nse=2026-11-23\nspr=https,http\nsip=127.0.0.1-127.0.0.2"
    cases = [
        (0, 0x04, 13, b"/devstoreaccount1/myqueue/messages?numofmessages=2&peekonly=true",
         b"x-ms-version:2026-04-06\nx-ms-date:Sun, 22 Nov 2026 00:00:00 GMT",
         b"SharedKey devstoreaccount1:qX9x0hi6+PD7oWVjsAb/mxxh3vk9QUq5pC/dlKvC3U0=",
         b"x-ms-meta-a_b", b"x-ms-meta-a1", b"x-ms-meta-a-b", account_sas, b""),
        (3, 0x85, 11, b"/devstoreaccount1-secondary/myqueue/messages",
         b"Content-Type:application/xml\nx-ms-Meta-B:1\nx-ms-meta-b:2\nDate:x",
         b"SharedKeyLite devstoreaccount1:adHUy8qYGbk2BPINvg67pcMIw6eIcQjBOrUtug8zvOQ=",
         b"X-MS-DATE", b"x-ms-date", b"x-ms-client-request-id", service_sas, b"body"),
        (0, 0x14, 13, b"/devstoreaccount1/myqueue?comp=acl&si=policy",
         b"", b"Bearer token", b"a'b", b"a-b", b"ab", b"sv=2015-04-05\nsi=policy", b""),
    ]
    for method, flags, access, target, headers, authorization, a, b, c, sas, body in cases:
        write("auth", bytes([method, flags, access]) + now
              + b"\0".join([target, headers, authorization, a, b, c, sas, body]))


def shard_state():
    # mode, start (2 bytes), shard, then operations: see shard_state.rs for the layout.
    create = bytes([0, 0, 0])              # CreateQueue queue 0, no metadata
    put = bytes([6, 0, 3, 5, 4, 10, 3]) + b"abc"  # Put: vis 5 s, ttl branch, text "abc"
    put_visible = bytes([6, 0, 0, 4, 20, 2]) + b"hi"
    get = bytes([9, 0, 4, 3, 3, 30])      # Get count 4, vis 30 s
    peek = bytes([11, 0, 31])              # Peek 32
    tick = bytes([19, 0, 3])               # one second
    delete = bytes([14, 0, 0, 0])          # Delete with the first receipt
    update = bytes([12, 0, 0, 0, 0, 0])    # Update, vis 0, no text
    metadata = bytes([3, 0])
    listing = bytes([5, 0, 0, 2, 0, 3, 1])
    steps = create + put + put_visible + peek + get + tick * 6 + get + update + delete + metadata + listing
    write("shard_state", b"\x00\x10\x00\x00" + steps)
    write("shard_state", b"\x01\x10\x00\x03" + steps + bytes([17, 0, 1]) + get)
    write("shard_state", b"\x00\x00\x00\x00" + create + bytes([6, 0, 0, 1, 0, 255]) + peek + delete)
    # Mode bit 1: the settings commands (operations 20 to 24) beside the others.
    set_acl = bytes([20, 0, 2, 0, 1, 1, 1, 1, 1, 0, 1, 3, 1, 0])  # two policies on queue 0
    get_acl = bytes([21, 0])
    set_properties = bytes([22, 0, 0, 1, 1, 1, 0, 1, 1, 1, 7, 0, 0, 1, 2, 0, 1, 1, 1, 90])
    replica = bytes([23, 0, 3, 1, 1, 1, 1, 0])                   # foreign ACL, version 4
    by_policy = bytes([24, 0, 1]) + put                          # a Put authorised by the ACL
    stale_policy = bytes([24, 0, 3, 0, 5]) + peek                # ... by a stale version
    settings = (create + set_acl + get_acl + by_policy + stale_policy + set_properties + replica
                + bytes([23, 0, 2, 0]) + bytes([2, 0]) + get_acl + create + by_policy)
    write("shard_state", b"\x02\x10\x00\x00" + settings)
    write("shard_state", b"\x03\x10\x00\x01" + settings + tick + get)


def storage_format():
    # Layouts: see storage_format.rs. Records: kind byte, then its fields.
    def text(data):
        return bytes([len(data)]) + data

    u32 = lambda value: struct.pack("<I", value)
    u64 = lambda value: struct.pack("<Q", value)
    created = bytes([0]) + u32(1) + text(b"devstoreaccount1") + text(b"orders") + bytes([1]) + text(b"k") + text(b"v")
    message = u32(1) + u32(7) + u32(1) + u64(42) + u64(1_700_000_000_000) + u32(604800) + u32(0) + u32(0) + u32(0) + u64(0)
    put = bytes([4]) + message + bytes([0]) + text(b"hello")
    big_puts = bytes([5]) + u32(65536) + bytes([0x61, 80]) + message + bytes([1]) + u64(9) + u64(3)
    leased = bytes([6]) + u32(7) + u32(1) + u32(1) + u32(1) + u64(1_700_000_030_000)
    updated = bytes([7]) + u32(7) + u32(1) + u32(2) + u64(0) + bytes([1]) + text(b"new")
    deleted = bytes([8]) + u32(7) + u32(1)
    acl = bytes([9]) + text(b"devstoreaccount1") + text(b"orders") + u64(3) + bytes([1]) + text(b"id") + bytes([1, 1]) + text(b"2026-01-01T00:00:00Z") + bytes([0, 1]) + text(b"raup")
    properties = bytes([10, 1, 1]) + u32(7) + bytes([1, 1, 1, 1]) + text(b"*") + text(b"GET") + text(b"") + text(b"x-ms-meta-*") + u64(60) + text(b"devstoreaccount1") + u64(2)
    other = bytes([1]) + u32(1) + bytes([0]) + bytes([2]) + u32(1) + text(b"a") + text(b"b") + bytes([3]) + u32(1) + u32(2)
    records = created + put + leased + updated + deleted + acl + properties + other
    for damage in range(4):
        segment = bytes([1]) + struct.pack("<H", 10) + bytes([damage]) + u32(5000) + bytes([0x40]) + u32(100)
        write("storage_format", segment + records)
        write("storage_format", segment + created + big_puts + put)
    for damage in range(3):
        snapshot = bytes([2]) + u64(0x12340001) + u64(99) + u64(7) + u64(500) + bytes([damage]) + u32(300) + bytes([0x10]) + u32(10)
        write("storage_format", snapshot + records)


for generate in (http_parser, xml_message, settings_xml, router, auth, shard_state, storage_format):
    generate()
print("wrote seeds under", os.path.normpath(ROOT), file=sys.stderr)
