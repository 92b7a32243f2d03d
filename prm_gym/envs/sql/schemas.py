"""Seeded SQLite databases (shop, school, flights) and question templates over them.

Each schema has a builder that fills a fresh database from a seeded RNG, and question templates
of graded difficulty that return ``(question, gold_sql)``:

1. one table with a filter;  2. a join;  3. GROUP BY / aggregates (with ORDER BY ... LIMIT);
4. nested queries (IN / NOT IN / comparison with a subquery).

Builders and templates are pure functions of the RNG, so a seed always gives the same data.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

Rng = np.random.Generator
Template = Callable[[Rng], tuple[str, str]]

_FIRST = ("Ana", "Ben", "Chloé", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jin", "Kim", "Leo")
_LAST = ("Smith", "Okafor", "Müller", "Tanaka", "Rossi", "Silva", "Novak", "Haddad")
_CITIES = ("Lagos", "Lyon", "Osaka", "Lima", "Oslo", "Pune", "Quito", "Riga")
_CATEGORIES = ("toys", "books", "garden", "kitchen", "music")
_STATUSES = ("paid", "shipped", "cancelled")
_DEPTS = ("Maths", "Physics", "History", "Art")
_HOUSES = ("Red", "Blue", "Green")
_COUNTRIES = ("Norway", "Peru", "Japan", "India", "France")
_AIRLINES = ("SkyJet", "AeroNord", "Condorra", "BlueWing", "Sunair", "Kestrel")


def _pick(rng: Rng, items: Sequence[str]) -> str:
    return items[int(rng.integers(len(items)))]


def _name(rng: Rng) -> str:
    return f"{_pick(rng, _FIRST)} {_pick(rng, _LAST)}"


def _i(rng: Rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


# ---------------------------------------------------------------- shop
def build_shop(conn: sqlite3.Connection, rng: Rng) -> None:
    conn.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, joined_year INTEGER);
        CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, price REAL);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                             year INTEGER, status TEXT);
        CREATE TABLE order_items (order_id INTEGER REFERENCES orders(id),
                                  product_id INTEGER REFERENCES products(id), quantity INTEGER);
        """
    )
    conn.executemany(
        "INSERT INTO customers VALUES (?, ?, ?, ?)",
        [(k, _name(rng), _pick(rng, _CITIES), _i(rng, 2015, 2024)) for k in range(1, 41)],
    )
    conn.executemany(
        "INSERT INTO products VALUES (?, ?, ?, ?)",
        [(k, f"item-{k:03d}", _pick(rng, _CATEGORIES), _i(rng, 100, 9999) / 100) for k in range(1, 31)],
    )
    conn.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        [(k, _i(rng, 1, 40), _i(rng, 2019, 2024), _pick(rng, _STATUSES)) for k in range(1, 121)],
    )
    conn.executemany(
        "INSERT INTO order_items VALUES (?, ?, ?)",
        [(_i(rng, 1, 120), _i(rng, 1, 30), _i(rng, 1, 5)) for _ in range(300)],
    )


def _shop_templates() -> dict[int, list[Template]]:
    def t1(r: Rng) -> tuple[str, str]:
        c = _pick(r, _CITIES)
        return f"What are the names of the customers who live in {c}?", f"SELECT name FROM customers WHERE city = '{c}'"

    def t1b(r: Rng) -> tuple[str, str]:
        cat, p = _pick(r, _CATEGORIES), _i(r, 10, 80)
        return (
            f"How many {cat} products cost more than {p} dollars?",
            f"SELECT COUNT(*) FROM products WHERE category = '{cat}' AND price > {p}",
        )

    def t2(r: Rng) -> tuple[str, str]:
        c, s = _pick(r, _CITIES), _pick(r, _STATUSES)
        return (
            f"List the ids of {s} orders placed by customers from {c}.",
            "SELECT o.id FROM orders o JOIN customers c ON o.customer_id = c.id "
            f"WHERE c.city = '{c}' AND o.status = '{s}'",
        )

    def t3(r: Rng) -> tuple[str, str]:
        k = _i(r, 2, 5)
        return (
            f"Which {k} cities have the most customers? Give each city and its number of customers, "
            "most first (ties broken by city name).",
            "SELECT city, COUNT(*) AS n FROM customers GROUP BY city ORDER BY n DESC, city LIMIT " + str(k),
        )

    def t3b(r: Rng) -> tuple[str, str]:
        return (
            "For each product category, what is the total quantity ordered?",
            "SELECT p.category, SUM(oi.quantity) FROM order_items oi JOIN products p "
            "ON oi.product_id = p.id GROUP BY p.category",
        )

    def t4(r: Rng) -> tuple[str, str]:
        y = _i(r, 2019, 2024)
        return (
            f"Which customers (names) placed no order in {y}?",
            f"SELECT name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders WHERE year = {y})",
        )

    def t4b(r: Rng) -> tuple[str, str]:
        cat = _pick(r, _CATEGORIES)
        return (
            f"Which {cat} products are priced above the average price of all products?",
            f"SELECT name FROM products WHERE category = '{cat}' AND price > (SELECT AVG(price) FROM products)",
        )

    return {1: [t1, t1b], 2: [t2], 3: [t3, t3b], 4: [t4, t4b]}


# ---------------------------------------------------------------- school
def build_school(conn: sqlite3.Connection, rng: Rng) -> None:
    conn.executescript(
        """
        CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT NOT NULL, grade INTEGER, house TEXT);
        CREATE TABLE teachers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, department TEXT);
        CREATE TABLE courses (id INTEGER PRIMARY KEY, title TEXT NOT NULL, department TEXT,
                              credits INTEGER, teacher_id INTEGER REFERENCES teachers(id));
        CREATE TABLE enrollments (student_id INTEGER REFERENCES students(id),
                                  course_id INTEGER REFERENCES courses(id), score INTEGER);
        """
    )
    conn.executemany(
        "INSERT INTO students VALUES (?, ?, ?, ?)",
        [(k, _name(rng), _i(rng, 9, 12), _pick(rng, _HOUSES)) for k in range(1, 61)],
    )
    conn.executemany("INSERT INTO teachers VALUES (?, ?, ?)", [(k, _name(rng), _DEPTS[k % 4]) for k in range(1, 9)])
    conn.executemany(
        "INSERT INTO courses VALUES (?, ?, ?, ?, ?)",
        [(k, f"{_DEPTS[k % 4]} {100 + k}", _DEPTS[k % 4], _i(rng, 1, 5), 1 + (k % 8)) for k in range(1, 17)],
    )
    pairs = {(_i(rng, 1, 60), _i(rng, 1, 16)) for _ in range(240)}
    conn.executemany("INSERT INTO enrollments VALUES (?, ?, ?)", [(s, c, _i(rng, 35, 100)) for s, c in sorted(pairs)])


def _school_templates() -> dict[int, list[Template]]:
    def t1(r: Rng) -> tuple[str, str]:
        g, h = _i(r, 9, 12), _pick(r, _HOUSES)
        return (
            f"What are the names of grade {g} students in the {h} house?",
            f"SELECT name FROM students WHERE grade = {g} AND house = '{h}'",
        )

    def t2(r: Rng) -> tuple[str, str]:
        d = _pick(r, _DEPTS)
        return (
            f"List the titles of {d} courses together with the name of their teacher.",
            f"SELECT c.title, t.name FROM courses c JOIN teachers t ON c.teacher_id = t.id WHERE c.department = '{d}'",
        )

    def t2b(r: Rng) -> tuple[str, str]:
        s = _i(r, 60, 95)
        return (
            f"Which students (names) scored at least {s} in some course? List each student once.",
            f"SELECT DISTINCT s.name FROM students s JOIN enrollments e ON e.student_id = s.id WHERE e.score >= {s}",
        )

    def t3(r: Rng) -> tuple[str, str]:
        return (
            "What is the average score in each department?",
            "SELECT c.department, AVG(e.score) FROM enrollments e JOIN courses c "
            "ON e.course_id = c.id GROUP BY c.department",
        )

    def t3b(r: Rng) -> tuple[str, str]:
        k = _i(r, 3, 6)
        return (
            f"Which courses have at least {k} enrolled students? Give the course titles.",
            "SELECT c.title FROM courses c JOIN enrollments e ON e.course_id = c.id "
            f"GROUP BY c.id HAVING COUNT(*) >= {k}",
        )

    def t4(r: Rng) -> tuple[str, str]:
        d = _pick(r, _DEPTS)
        return (
            f"Which students (names) are not enrolled in any {d} course?",
            "SELECT name FROM students WHERE id NOT IN (SELECT e.student_id FROM enrollments e "
            f"JOIN courses c ON e.course_id = c.id WHERE c.department = '{d}')",
        )

    return {1: [t1], 2: [t2, t2b], 3: [t3, t3b], 4: [t4]}


# ---------------------------------------------------------------- flights
def build_flights(conn: sqlite3.Connection, rng: Rng) -> None:
    conn.executescript(
        """
        CREATE TABLE airports (code TEXT PRIMARY KEY, city TEXT NOT NULL, country TEXT);
        CREATE TABLE airlines (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT);
        CREATE TABLE flights (id INTEGER PRIMARY KEY, airline_id INTEGER REFERENCES airlines(id),
                              origin TEXT REFERENCES airports(code),
                              destination TEXT REFERENCES airports(code),
                              distance_km INTEGER, duration_min INTEGER);
        """
    )
    codes = [c[:3].upper() for c in _CITIES]
    conn.executemany(
        "INSERT INTO airports VALUES (?, ?, ?)",
        [(c, city, _pick(rng, _COUNTRIES)) for c, city in zip(codes, _CITIES, strict=True)],
    )
    conn.executemany(
        "INSERT INTO airlines VALUES (?, ?, ?)", [(k, a, _pick(rng, _COUNTRIES)) for k, a in enumerate(_AIRLINES, 1)]
    )
    rows = []
    for k in range(1, 151):
        o, d = rng.choice(len(codes), size=2, replace=False)
        dist = _i(rng, 300, 9000)
        rows.append((k, _i(rng, 1, len(_AIRLINES)), codes[int(o)], codes[int(d)], dist, dist // 12 + _i(rng, 20, 60)))
    conn.executemany("INSERT INTO flights VALUES (?, ?, ?, ?, ?, ?)", rows)


def _flight_templates() -> dict[int, list[Template]]:
    def t1(r: Rng) -> tuple[str, str]:
        d = _i(r, 20, 80) * 100
        return (f"How many flights are longer than {d} km?", f"SELECT COUNT(*) FROM flights WHERE distance_km > {d}")

    def t2(r: Rng) -> tuple[str, str]:
        a = _pick(r, _AIRLINES)
        return (
            f"To which cities does {a} fly? List each city once.",
            "SELECT DISTINCT ap.city FROM flights f JOIN airlines al ON f.airline_id = al.id "
            f"JOIN airports ap ON f.destination = ap.code WHERE al.name = '{a}'",
        )

    def t3(r: Rng) -> tuple[str, str]:
        k = _i(r, 2, 4)
        return (
            f"Which {k} airlines operate the most flights? Give the airline name and the number of "
            "flights, most first (ties broken by name).",
            "SELECT al.name, COUNT(*) AS n FROM flights f JOIN airlines al ON f.airline_id = al.id "
            f"GROUP BY al.id ORDER BY n DESC, al.name LIMIT {k}",
        )

    def t3b(r: Rng) -> tuple[str, str]:
        return (
            "What is the longest flight distance from each origin airport code?",
            "SELECT origin, MAX(distance_km) FROM flights GROUP BY origin",
        )

    def t4(r: Rng) -> tuple[str, str]:
        c = _pick(r, _CITIES)
        return (
            f"Which flights (ids) leaving {c} are longer than the average flight?",
            "SELECT f.id FROM flights f JOIN airports a ON f.origin = a.code "
            f"WHERE a.city = '{c}' AND f.distance_km > (SELECT AVG(distance_km) FROM flights)",
        )

    return {1: [t1], 2: [t2], 3: [t3, t3b], 4: [t4]}


@dataclass(frozen=True)
class Schema:
    """A database generator and its question templates by difficulty level."""

    name: str
    build: Callable[[sqlite3.Connection, Rng], None]
    templates: dict[int, list[Template]]


SCHEMAS: dict[str, Schema] = {
    "shop": Schema("shop", build_shop, _shop_templates()),
    "school": Schema("school", build_school, _school_templates()),
    "flights": Schema("flights", build_flights, _flight_templates()),
}
